"""SFT through LLaMA-Factory: the generated config keeps the recipe's batch and schedule on any cluster shape,
and (in its own environment, ``make train-env``) really trains the tiny local model from the project's export,
its loss going down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datamind.train.config import TrainConfig
from datamind.train.engines import Cluster
from datamind.train.llamafactory import TRAIN_ENV, command, sft_config, write_config


@pytest.mark.parametrize(
    ("cluster", "micro", "accumulation", "bf16"),
    [
        (Cluster(gpus_per_node=0), 2, 8, False),  # CPU: one process does the whole batch of 16
        (Cluster(gpus_per_node=1), 2, 8, True),
        (Cluster(gpus_per_node=8), 2, 1, True),
        (Cluster(nnodes=2, gpus_per_node=4), 2, 1, True),
    ],
)
def test_global_batch_and_recipe_values_hold_on_every_cluster_shape(cluster, micro, accumulation, bf16):
    cfg = TrainConfig(base_model_path="/models/qwen", export_dir="/x")  # table 2: 16 sequences, lr 1e-5, 3 epochs
    c = sft_config(cfg, "/exports/v1", "/runs/r1", template="qwen", cluster=cluster)
    assert c["per_device_train_batch_size"] * c["gradient_accumulation_steps"] * cluster.world_size == 16
    assert (c["per_device_train_batch_size"], c["gradient_accumulation_steps"], c["bf16"]) == (
        micro,
        accumulation,
        bf16,
    )
    assert c["learning_rate"] == 1e-5 and c["num_train_epochs"] == 3.0 and c["lr_scheduler_type"] == "cosine"
    assert c["warmup_ratio"] == 0.1 and c["cutoff_len"] == 8192
    assert c["dataset"] == "datamind_sft" and c["dataset_dir"] == "/exports/v1/sft"
    assert c["stage"] == "sft" and c["finetuning_type"] == "full" and c["template"] == "qwen"
    assert c.get("use_cpu", False) is (cluster.gpus_per_node == 0)


def test_a_batch_that_cannot_be_split_over_the_devices_is_refused():
    cfg = TrainConfig(base_model_path="/m", export_dir="/x").with_overrides({"sft": {"batch_size": 12}})
    with pytest.raises(ValueError, match="not a multiple"):
        sft_config(cfg, "/e", "/o", cluster=Cluster(nnodes=2, gpus_per_node=4))


def test_multi_node_runs_go_through_llamafactory_torchrun_launcher():
    argv, env = command("/runs/r1/sft.yaml", Cluster(nnodes=2, gpus_per_node=8, node_rank=1, master_addr="10.0.0.5"))
    assert argv[1:] == ["train", "/runs/r1/sft.yaml"] and argv[0].endswith("bin/llamafactory-cli")
    assert env == {"FORCE_TORCHRUN": "1", "NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "8",
                   "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}  # fmt: skip
    assert command("/c.yaml", Cluster(gpus_per_node=1))[1] == {}  # one device: no launcher


def test_the_deployments_engine_environment_is_used(monkeypatch):
    """The GPU image puts LLaMA-Factory in /opt/venv-train and says so in DATAMIND_TRAIN_ENV."""
    monkeypatch.setenv("DATAMIND_TRAIN_ENV", "/opt/venv-train")
    assert command("/c.yaml")[0][0] == "/opt/venv-train/bin/llamafactory-cli"
    assert command("/c.yaml", env_dir="/elsewhere")[0][0] == "/elsewhere/bin/llamafactory-cli"
    monkeypatch.delenv("DATAMIND_TRAIN_ENV")
    assert command("/c.yaml")[0][0] == str(TRAIN_ENV / "bin" / "llamafactory-cli")


@pytest.mark.skipif(
    not (TRAIN_ENV / "bin" / "llamafactory-cli").exists(), reason="LLaMA-Factory's environment: make train-env"
)
def test_llamafactory_trains_the_tiny_model_from_the_export_through_the_local_launcher(exported, tiny_model_dir):
    """LLaMA-Factory really trains (on the CPU, the tiny Llama built locally, the project's own export: its loss
    goes down), and the run reads back like a builtin one: progress lines, a manifest, the checkpoint."""
    from datamind.train.launchers import LocalLauncher, run
    from datamind.train.protocol import progress

    root, result = exported
    cfg = TrainConfig(
        base_model_path=tiny_model_dir,
        export_dir=result.export_dir,
        data_root=root.uri(),
        phase="sft",
        engine="llamafactory",
    ).with_overrides(
        {"sft": {"batch_size": 4, "micro_batch_size": 4, "max_steps": 20, "learning_rate": 3e-3, "cutoff_len": 512}}
    )
    lines: list[str] = []
    launched = run(LocalLauncher(env={"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}), cfg, lines.append)
    steps = [p for p in map(progress, lines) if p]
    assert [p["step"] for p in steps] == list(range(1, 21)), lines[-30:]
    losses = [p["loss"] for p in steps]
    print(f"LLaMA-Factory SFT on CPU, loss per step: {losses}")
    assert sum(losses[-3:]) / 3 < 0.75 * sum(losses[:3]) / 3, losses  # it learned the export's conversations
    manifest = json.loads(root.read_text("runs", "train", launched.run_id, "manifest.json"))
    assert manifest["status"] == "succeeded" and manifest["engine"] == "llamafactory"
    final = launched.checkpoint_uri.split("://", 1)[-1]
    assert Path(final, "config.json").exists() and any(Path(final).glob("*.safetensors"))


def test_rl_is_not_silently_run_on_an_sft_only_engine():
    with pytest.raises(ValueError, match="SFT phase only"):
        TrainConfig(base_model_path="/m", export_dir="/e", phase="sft+rl", engine="llamafactory").validate()


def test_the_written_config_reads_back_with_numbers_as_numbers(tmp_path):
    import yaml

    cfg = TrainConfig(base_model_path="/m", export_dir="/e")  # lr 1e-5: JSON's 1e-05 is a string to YAML 1.1
    path = write_config(str(tmp_path / "sft.yaml"), sft_config(cfg, "/e", "/o"))
    back = yaml.safe_load(Path(path).read_text())
    assert back["learning_rate"] == 1e-5 and isinstance(back["learning_rate"], float)
    assert back == sft_config(cfg, "/e", "/o")


def test_the_fitted_cutoff_keeps_every_exported_conversation_whole(exported, tokenizer):
    """A cutoff below a release's conversations cuts their answers: the fitted one is the smallest multiple of
    64 that holds the longest, counted with the same chat template the trainer renders."""
    import os

    from datamind.train.exports import SFT_FILE
    from datamind.train.llamafactory import conversation_lengths, fit_cutoff
    from datamind.train.tokenization import render

    root, result = exported
    path = os.path.join(root.local_dir(result.export_dir), SFT_FILE)
    lengths = conversation_lengths(path, tokenizer)
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line)["messages"] for line in fh if line.strip()]
    assert len(lengths) == len(rows) >= 2
    for n, msgs in zip(lengths, rows, strict=True):  # every turn is counted, the answer included
        assert n > len(tokenizer(render(tokenizer, msgs[:-1]))["input_ids"])
    cutoff = fit_cutoff(lengths)
    assert cutoff % 64 == 0 and max(lengths) <= cutoff < max(lengths) + 64
    assert fit_cutoff([768, 1810, 1057]) == 1856 and fit_cutoff([1024]) == 1024
