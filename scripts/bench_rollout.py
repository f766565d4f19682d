"""Throughput of the trajectory stages on this machine: prints medians (and ratios) over repeated runs.

    .venv/bin/python scripts/bench_rollout.py [--copies 8] [--repeats 3]

1. offline sampling (real sandbox, chunked mode): trajectories/s and sandbox turns/s;
2. LLM sampling against the local OpenAI-compatible server with 0.2 s latency per call: wall time with
   concurrency 1 vs 8 (the asyncio overlap of LLM waits);
3. offline judging with reflection: queries/s;
4. rule filters and publishing: rows/s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fakes.openai_server import FakeOpenAIServer  # noqa: E402
from rollout.corpus import build_corpus, queries  # noqa: E402

from datamind.agent.params import RolloutParams  # noqa: E402
from datamind.filters.rules import apply_filters  # noqa: E402
from datamind.judge.params import JudgeParams  # noqa: E402
from datamind.judge.stage import judge_shard, plan_judging  # noqa: E402
from datamind.llm import LLMClient, LLMConfig  # noqa: E402
from datamind.publish.stage import publish_dataset  # noqa: E402
from datamind.rollout.stage import plan_sampling, sample_shard  # noqa: E402
from datamind.sandbox import Sandbox, SandboxLimits  # noqa: E402
from datamind.schemas import DATASET  # noqa: E402
from datamind.shards import read_rows, write_shard  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402


def replicated(copies: int, only: tuple[str, ...] | None = None) -> list[dict]:
    out = []
    for c in range(copies):
        for q in queries():
            if only and q["query_id"] not in only:
                continue
            row = dict(q, query_id=f"{q['query_id']}_{c}", root_query_id=f"{q['root_query_id']}_{c}")
            row["parent_query_ids"] = [f"{p}_{c}" for p in q["parent_query_ids"]]
            out.append(row)
    return out


def median(xs):
    return statistics.median(xs)


def fresh_root(tmp: Path, rows: list[dict]) -> DataRoot:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    root = DataRoot(str(tmp / "data"))
    build_corpus(root, str(tmp), rows)
    return root


def bench_offline(sandbox, base: Path, copies: int, repeats: int):
    rows = [r for r in replicated(copies) if not r["query_id"].startswith("q6")]  # keep xlsx out: openpyxl dominates
    times, n_traj, n_turns = [], 0, 0
    for i in range(repeats):
        root = fresh_root(base / f"off{i}", rows)
        specs = plan_sampling(root, 1000, RolloutParams())
        t0 = time.perf_counter()
        summaries = [sample_shard(root, s, RolloutParams(exec_workers=2), "bench", sandbox=sandbox) for s in specs]
        times.append(time.perf_counter() - t0)
        n_traj = sum(s["n_trajectories"] for s in summaries)
        from datamind.schemas import TRAJECTORIES

        n_turns = sum(r["n_turns"] for r in read_rows(root, TRAJECTORIES, "trajectories"))
    t = median(times)
    print(
        f"offline sampling: {n_traj} trajectories ({n_turns} turns) in median {t:.2f} s "
        f"-> {n_traj / t:.1f} trajectories/s, {n_turns / t:.1f} turns/s (exec_workers=2, chunked sandbox)"
    )
    return root


def bench_llm(sandbox, base: Path, copies: int):
    from rollout.corpus import expected

    exp = expected()

    def responder(body):
        msgs = body["messages"]
        n = sum(m["role"] == "assistant" for m in msgs)
        if n == 0:
            return "<think>load</think><code>import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.shape)</code>"
        if n == 1:
            return "<think>sum</think><code>print(int(df.loc[df['region'] == 'North', 'units'].sum()))</code>"
        return f"<think>done</think><answer>{exp['q1']}</answer>"

    rows = replicated(copies * 2, only=("q1",))
    results = {}
    with FakeOpenAIServer(latency_s=0.2, responder=responder, record_bodies=False) as server:
        for conc in (1, 8):
            root = fresh_root(base / f"llm{conc}", rows)
            cfg = LLMConfig(
                base_url=server.base_url,
                api_key="x",
                models={"expert": "e", "judge": "j", "synthesizer": "s"},
                max_concurrency=16,
            )
            client = LLMClient(cfg, cache=None)
            specs = plan_sampling(root, 1000, RolloutParams(backend="llm"))
            t0 = time.perf_counter()
            s = sample_shard(
                root,
                specs[0],
                RolloutParams(backend="llm", concurrency=conc, exec_workers=2),
                "bench",
                llm_client=client,
                sandbox=sandbox,
            )
            results[conc] = (time.perf_counter() - t0, s["n_trajectories"], s["n_answered"])
    (t1, n, a1), (t8, _, a8) = results[1], results[8]
    print(
        f"LLM sampling ({n} trajectories x 3 calls, 0.2 s/call): concurrency 1 {t1:.2f} s, concurrency 8 {t8:.2f} s "
        f"-> speed-up x{t1 / t8:.1f} (answered {a1}/{a8})"
    )


def bench_judge(sandbox, sampled_root: DataRoot, base: Path, repeats: int):
    times, n = [], 0
    for i in range(repeats):
        dst = base / f"judge{i}"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(Path(sampled_root.root).parent, dst)
        root = DataRoot(str(dst / "data"))
        specs = plan_judging(root, 1000, JudgeParams())
        n = sum(len(s["query_ids"]) for s in specs)
        t0 = time.perf_counter()
        for s in specs:
            judge_shard(root, s, JudgeParams(), "bench", sandbox=sandbox)
        times.append(time.perf_counter() - t0)
    t = median(times)
    print(
        f"offline judging (with reflection of the inconsistent queries): {n} queries "
        f"in median {t:.2f} s -> {n / t:.1f} queries/s"
    )
    return root


def bench_filters_publish(judged_root: DataRoot, base: Path, repeats: int):
    rows = read_rows(judged_root, DATASET, "judged")
    big = []
    for k in range(max(1, 2000 // max(len(rows), 1))):
        big += [dict(r, sample_id=f"{r['sample_id']}-{k}") for r in rows]
    ft, pt = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        apply_filters(big)
        ft.append(time.perf_counter() - t0)
        root = DataRoot(str(base / f"pub{i}" / "data"))
        write_shard(root, DATASET, "judged", big, "part-bench.parquet")
        t0 = time.perf_counter()
        m = publish_dataset(root, "bench", shard_rows=500)
        pt.append(time.perf_counter() - t0)
    print(f"rule filters: {len(big)} rows in median {median(ft):.2f} s -> {len(big) / median(ft):.0f} rows/s")
    print(
        f"publish (read judged + filters + {len(m['shards'])} zstd shards + manifest): median {median(pt):.2f} s "
        f"-> {len(big) / median(pt):.0f} rows/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    try:
        with Sandbox(SandboxLimits(), mode="chunked") as sandbox:
            sampled = bench_offline(sandbox, base, args.copies, args.repeats)
            judged = bench_judge(sandbox, sampled, base, args.repeats)
            bench_llm(sandbox, base, args.copies)
        bench_filters_publish(judged, base, args.repeats)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
