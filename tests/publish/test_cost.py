"""A release's LLM cost per accepted sample, at thousands of queries: the sums are checked against the rows as
they were written, and the work holds no Python object per trajectory."""

from __future__ import annotations

import random
import tracemalloc

import pyarrow as pa

from datamind.assets import DIRS
from datamind.llm.config import Price
from datamind.publish.cost import release_cost
from datamind.shards import table_to_parquet_bytes
from datamind.storage import DataRoot

FIELDS = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "cached_completion_tokens")
PRICES = {"big": Price(prompt=3.0, completion=15.0), "small": Price(prompt=0.25, completion=1.0)}


def _write(root: DataRoot, rel: str, name: str, rows: list[dict], columns: list[str]) -> None:
    root.write_bytes(f"{rel}/{name}", table_to_parquet_bytes(pa.table({c: [r.get(c) for r in rows] for c in columns})))


def test_the_cost_of_thousands_of_samples_adds_every_call_of_their_questions(tmp_path):
    rng = random.Random(7)
    root = DataRoot(str(tmp_path / "data"))
    n_queries = 3_000
    queries = [{"query_id": f"q{i:05d}", "category": rng.choice(["ranking", "aggregation"]), "hop": rng.randint(1, 3)}
               for i in range(n_queries)]  # fmt: skip

    def usage(model):
        p, c = rng.randint(0, 900), rng.randint(0, 300)
        return {"model": model, "prompt_tokens": p, "completion_tokens": c,
                "cached_prompt_tokens": rng.randint(0, p), "cached_completion_tokens": rng.randint(0, c)}  # fmt: skip

    synth = [{"query_id": q["query_id"], **usage("big")} for q in queries]
    trajs = [
        {"query_id": q["query_id"], **usage(rng.choice(["big", "small", None]))} for q in queries for _ in range(3)
    ]
    for i in range(0, n_queries, 1_000):  # three shards of each table, in the layout the stages write
        _write(root, DIRS["queries"], f"part-{i}.parquet", synth[i : i + 1_000], ["query_id", "model", *FIELDS])
    for i in range(0, len(trajs), 3_000):
        _write(root, DIRS["trajectories"], f"part-{i}.parquet", trajs[i : i + 3_000], ["query_id", "model", *FIELDS])
    # a shard written before the cache columns existed: they read as zero
    old = [{"query_id": "q00000", "model": "small", "prompt_tokens": 50, "completion_tokens": 5}]
    _write(
        root, DIRS["trajectories"], "part-old.parquet", old, ["query_id", "model", "prompt_tokens", "completion_tokens"]
    )
    trajs += [{**old[0], "cached_prompt_tokens": 0, "cached_completion_tokens": 0}]

    samples = [q for q in queries if q["query_id"] != "q00007"][:2_500]
    samples.append(samples[0])  # two samples of one question: each is paid for by its calls

    table = pa.Table.from_pylist(samples)
    tracemalloc.start()
    cost = release_cost(root, table, PRICES)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    calls: dict[str, list[dict]] = {}
    for r in synth + trajs:
        calls.setdefault(r["query_id"], []).append(r)
    expected: dict[str, dict] = {}
    for s in samples:
        cell = expected.setdefault(
            f"{s['category']} / hop {s['hop']}", {"samples": 0, "usd": 0.0, **dict.fromkeys(FIELDS, 0)}
        )
        cell["samples"] += 1
        for r in calls[s["query_id"]]:
            for f in FIELDS:
                cell[f] += r[f]
            if r["model"] in PRICES:
                pr = PRICES[r["model"]]
                cell["usd"] += (
                    (r["prompt_tokens"] - r["cached_prompt_tokens"]) * pr.prompt
                    + (r["completion_tokens"] - r["cached_completion_tokens"]) * pr.completion
                ) / 1e6
    assert set(cost["by_category_hop"]) == set(expected)
    for key, want in expected.items():
        got = cost["by_category_hop"][key]
        assert got["samples"] == want["samples"] and all(got[f] == want[f] for f in FIELDS), key
        assert abs(got["usd"] - want["usd"]) < 1e-6, key
    assert cost["total"]["samples"] == len(samples) == 2_501
    assert cost["total"]["prompt_tokens"] == sum(e["prompt_tokens"] for e in expected.values())
    assert not cost["priced"]  # the calls with no model have tokens and no price
    # One Python object per trajectory (9,001 here) would take several MB; per cell and model, a few KB.
    assert peak < 2_000_000, peak


def test_a_release_whose_calls_all_have_a_price_is_priced_and_the_offline_engine_costs_nothing(tmp_path):
    root = DataRoot(str(tmp_path / "data"))
    rows = [{"query_id": "q1", "model": "small", "prompt_tokens": 1_000, "completion_tokens": 100,
             "cached_prompt_tokens": 400, "cached_completion_tokens": 0}]  # fmt: skip
    _write(root, DIRS["trajectories"], "part-a.parquet", rows, ["query_id", "model", *FIELDS])
    free = [{"query_id": "q1", "model": "offline-synth", "prompt_tokens": 0, "completion_tokens": 0}]
    _write(root, DIRS["queries"], "part-a.parquet", free, ["query_id", "model", "prompt_tokens", "completion_tokens"])
    cost = release_cost(root, pa.Table.from_pylist([{"query_id": "q1", "category": "ranking", "hop": 1}]), PRICES)
    assert cost["priced"]  # the offline synthesis made no paid call: its missing price does not matter
    total = cost["total"]
    assert total["usd"] == round((600 * 0.25 + 100 * 1.0) / 1e6, 6) and total["saved_usd"] == round(400 * 0.25 / 1e6, 6)
    assert total["paid_tokens_per_sample"] == 700 and total["cached_tokens_per_sample"] == 400
