import json

from train_helpers import dataset_rows, write_dataset

from datamind.train.__main__ import main


def test_export_command_prints_result(data_root, capsys):
    write_dataset(data_root, dataset_rows())
    assert main(["export", "--data-root", data_root.url]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_rows"] == 4 and out["version"] == "v1" and not out["reused"]  # the release's own name
    assert main(["export", "--data-root", data_root.url]) == 0
    assert json.loads(capsys.readouterr().out)["reused"] is True


def test_export_command_fails_cleanly_on_empty_root(data_root, capsys):
    assert main(["export", "--data-root", data_root.url]) == 1
    assert "no complete dataset release" in capsys.readouterr().err


def test_train_command_rejects_bad_config(data_root, capsys, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"base_model_path": "/m", "export_dir": "/e"}))
    assert main(["train", "--config", str(cfg), "--set", "rl.mini_batch_size=3", "--data-root", data_root.url]) == 1
    assert "multiple of rl.mini_batch_size" in capsys.readouterr().err
