"""Helpers and fixtures for the training tests: a tokenizer and a tiny Llama built locally, and a small dataset.

Imported by conftest.py (fixtures) and by test modules (helpers) under a unique module name: several test
folders have a conftest.py, so `from conftest import ...` would pick up whichever was imported first."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

# One intra-op thread: on a small shared CPU, torch's thread pool spins against other processes and
# makes these tiny models ~10x slower. Set before torch is imported; inherited by launched subprocesses.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from datamind.schemas import DATASET  # noqa: E402
from datamind.shards import write_shard  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402

SYSTEM = "You are a data analyst. Think in <think>, run Python in <code>, answer in <answer>."


def conversation(question: str, code: str, output: str, answer: str) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
        {"role": "assistant", "content": f"<think>Load the table first.</think><code>{code}</code>"},
        {"role": "tool", "content": f"<interpreter>\n{output}\n</interpreter>"},
        {"role": "assistant", "content": f"<think>That settles it.</think><answer>{answer}</answer>"},
    ]


QUESTIONS = [
    ("How many rows does sales.csv have?", "print(len(open('data/files/sales.csv').readlines()) - 1)", "3", "3"),
    ("What is the total of column a?", "print(1 + 2 + 3)", "6", "6"),
    ("Which region sells most?", "print('north')", "north", "north"),
    ("What is the mean of column b?", "print((4 + 5 + 6) / 3)", "5.0", "5"),
]


def dataset_rows(n: int = 4) -> list[dict]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i, (q, code, out, ans) in enumerate(QUESTIONS[:n]):
        rows.append(
            {
                "sample_id": f"s{i:02d}",
                "query_id": f"q{i:02d}",
                "trajectory_id": f"t{i:02d}",
                "file_id": "f-sales",
                "data_uri": None,
                "data_format": "csv",
                "category": ["counting", "aggregation", "ranking", "statistics"][i % 4],
                "hop": 1,
                "question": q,
                "messages": conversation(q, code, out, ans),
                "final_answer": ans,
                "created_at": now,
            }
        )
    return rows


def write_dataset(root: DataRoot, rows: list[dict], shard_size: int = 2, version: int = 1) -> None:
    """A complete release as publishing lays it out: dataset/v<N>/part-*.parquet, manifest written last."""
    for k in range(0, len(rows), shard_size):
        part = rows[k : k + shard_size]
        write_shard(root, DATASET, f"dataset/v{version}", part, name=f"part-{k:03d}.parquet")
    root.write_text(f"dataset/v{version}/manifest.json", json.dumps({"version": version, "version_id": f"v{version}"}))


def build_tokenizer():
    from datamind.train.tiny import build_tokenizer as build

    return build(m["content"] for row in dataset_rows() for m in row["messages"])


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A randomly initialised 2-layer Llama and its tokenizer, saved like any local checkpoint."""
    import torch

    from datamind.train.tiny import build_tiny_model

    torch.set_num_threads(1)  # in case torch was imported before this conftest set OMP_NUM_THREADS
    texts = [m["content"] for row in dataset_rows() for m in row["messages"]]
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny-llama")), texts)


@pytest.fixture
def data_root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "root"))


@pytest.fixture
def exported(data_root):
    """The standard 4-sample dataset, exported; returns (root, ExportResult)."""
    from datamind.train.exports import export

    write_dataset(data_root, dataset_rows())
    return data_root, export(data_root)


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class ScriptedPolicy:
    """A GenerateFn replaying fixed turns per trajectory. The agent loop steps the active trajectories
    together in a stable order, so the i-th conversation of a call belongs to the i-th still-active script."""

    def __init__(self, scripts: list[list[str]]):
        self.scripts = scripts
        self.active = list(range(len(scripts)))

    def __call__(self, conversations, max_new_tokens):
        assert len(conversations) == len(self.active)
        texts = []
        for k, conv in zip(self.active, conversations, strict=True):
            turn = sum(m["role"] == "assistant" for m in conv)
            texts.append(self.scripts[k][turn])
        self.active = [k for k, t in zip(self.active, texts, strict=True) if "<code>" in t]
        return texts


def code_turn(code: str) -> str:
    return f"<think>Run it.</think><code>{code}</code>"


def answer_turn(answer: str) -> str:
    return f"<think>Done.</think><answer>{answer}</answer>"


# Tight sandbox caps so a hostile cell ends quickly (1 GiB still leaves room above the preloaded pandas).
SANDBOX_TEST_LIMITS = dict(
    wall_s=4.0, cpu_s=2, memory_mb=1024, max_output_bytes=200_000, head_chars=500, tail_chars=500, sql_timeout_s=1.0
)
