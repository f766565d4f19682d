import json

import pyarrow.parquet as pq
import pytest
from train_helpers import dataset_rows, write_dataset

from datamind.agent.protocol import split_conversation
from datamind.schemas import REJECTIONS
from datamind.shards import read_rows
from datamind.storage import DataRoot
from datamind.train.exports import SFT_DATASET_NAME, export


def test_sft_export_is_llamafactory_sharegpt(exported):
    root, res = exported
    lines = open(res.sft_path, encoding="utf-8").read().splitlines()
    rows = sorted(dataset_rows(), key=lambda r: r["sample_id"])
    assert [json.loads(line) for line in lines] == [{"messages": r["messages"]} for r in rows]
    info = json.load(open(res.dataset_info_path))
    entry = info[SFT_DATASET_NAME]
    assert entry["formatting"] == "sharegpt" and entry["file_name"] == "datamind_sft.jsonl"
    assert entry["columns"] == {"messages": "messages"}
    # Interpreter turns are LLaMA-Factory observations: never trained on.
    assert entry["tags"]["observation_tag"] == "tool" and entry["tags"]["assistant_tag"] == "assistant"


def test_rl_export_is_verl_layout(exported):
    root, res = exported
    table = pq.read_table(res.rl_path)
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info", "target"} <= set(table.column_names)
    rows = table.to_pylist()
    src = {r["sample_id"]: r for r in dataset_rows()}
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
    for r in rows:
        s = src[r["extra_info"]["sample_id"]]
        assert r["prompt"] == s["messages"][:2]
        assert [{"role": m["role"], "content": m["content"]} for m in r["target"]] == s["messages"][2:]
        assert [m["loss_mask"] for m in r["target"]] == [1, 0, 1]  # the tool turn is masked
        assert r["reward_model"]["ground_truth"] == s["final_answer"]
        assert r["extra_info"]["question"] == s["question"] and r["extra_info"]["category"] == s["category"]
        assert r["extra_info"]["dataset_version"] == res.version and r["data_source"] == "datamind"


def test_export_is_byte_reproducible_and_versioned(tmp_path):
    rows = dataset_rows()
    a, b = DataRoot(str(tmp_path / "a")), DataRoot(str(tmp_path / "b"))
    write_dataset(a, rows, shard_size=1)
    write_dataset(b, list(reversed(rows)), shard_size=3)  # other order, other shards, same content
    ra, rb = export(a), export(b)
    assert ra.version == rb.version == "v1"  # the release's own name, the same everywhere
    for rel in ra.files:
        assert open(f"{ra.export_dir}/{rel}", "rb").read() == open(f"{rb.export_dir}/{rel}", "rb").read()
    assert open(f"{ra.export_dir}/manifest.json", "rb").read() == open(f"{rb.export_dir}/manifest.json", "rb").read()
    again = export(a)
    assert again.reused and again.files == ra.files
    # Changed content -> a new release v2 -> its own export; the v1 export stays untouched.
    before = {rel: open(f"{ra.export_dir}/{rel}", "rb").read() for rel in ra.files}
    changed = [dict(r) for r in rows]
    changed[0]["final_answer"] = "4"
    write_dataset(a, changed, version=2)
    rc = export(a)
    assert rc.version == "v2" and rc.export_dir != ra.export_dir and not rc.reused
    assert {rel: open(f"{ra.export_dir}/{rel}", "rb").read() for rel in ra.files} == before


def test_bad_rows_are_rejected_with_reasons(data_root):
    rows = dataset_rows()
    rows[1]["messages"] = rows[1]["messages"][:-1]  # ends with the tool turn
    rows[2]["messages"] = [
        rows[2]["messages"][0],
        rows[2]["messages"][1],
        rows[2]["messages"][2],
        rows[2]["messages"][4],
    ]
    write_dataset(data_root, rows)
    res = export(data_root)
    assert res.n_rows == 2 and res.n_rejected == 2
    manifest = json.load(open(f"{res.export_dir}/manifest.json"))
    assert {(r["sample_id"], r["reason_code"]) for r in manifest["rejected"]} == {
        ("s01", "ends_with_tool"),
        ("s02", "bad_alternation"),
    }
    recorded = read_rows(data_root, REJECTIONS, "rejections/export")
    assert {r["item_id"] for r in recorded} == {"s01", "s02"} and {r["stage"] for r in recorded} == {"export"}


def test_empty_dataset_is_an_error(data_root):
    with pytest.raises(ValueError, match="no complete dataset release"):
        export(data_root)


def test_held_out_rows_never_reach_training(data_root):
    rows = dataset_rows()
    for r in rows:
        r["split"] = "test" if r["sample_id"] in ("s00", "s01") else "train"
    write_dataset(data_root, rows)
    res = export(data_root)
    exported = {r["extra_info"]["sample_id"] for r in pq.read_table(res.rl_path).to_pylist()}
    assert exported == {r["sample_id"] for r in rows} - {"s00", "s01"} and res.n_rows == len(rows) - 2


@pytest.mark.parametrize(
    "roles, code",
    [
        ([], "empty_messages"),
        (["system", "user"], "no_assistant_turn"),
        (["user", "assistant", "tool"], "ends_with_tool"),
        (["system", "assistant"], "bad_prompt"),
        (["user", "assistant", "assistant"], "bad_alternation"),
        (["user", "critic", "assistant"], "unknown_role"),
    ],
)
def test_split_conversation_reasons(roles, code):
    with pytest.raises(ValueError, match=f"^{code}:"):
        split_conversation([{"role": r, "content": "x"} for r in roles])


def test_split_conversation_ok():
    msgs = [{"role": r, "content": r} for r in ["system", "user", "assistant", "tool", "assistant"]]
    prompt, target = split_conversation(msgs)
    assert [m["role"] for m in prompt] == ["system", "user"] and len(target) == 3
