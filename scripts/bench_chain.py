"""The whole offline chain over a folder of data files, stage by stage as the DAGs run it: samples per second,
and where the seconds go.

    python scripts/bench_chain.py ../shared/data/dabench/da-dev-tables
    python scripts/bench_chain.py FOLDER --profile rollout      # also cProfile one shard of a stage
    python scripts/bench_chain.py FOLDER --repeat 3              # medians over three fresh runs

Each stage runs its planner, then its shards on ``--workers`` processes (the DAGs map shards over two task
instances at a time), then its finaliser (the Great Expectations report), with every parameter at the DAG
form's default. Airflow's own cost per task instance is not in these figures (``airflow dags test`` adds about
8 s per DAG and 0.1 s per task instance here); everything the stage's code does is.

It prints, per run, each stage's seconds and share of the whole, the published samples, and samples/s; with
``--repeat`` the medians; with ``--profile`` the functions where one shard of that stage spends its time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import importlib
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

STAGES = ("ingest", "profile", "synth", "rollout", "judge", "publish")
INGEST_SHARD = 50  # the ingest DAG's default files per task instance


def _params(stage: str, form: dict):
    """The stage's parameters from its form as the DAG edge builds them: the DAG form's defaults, then ``--set``
    (bench_scale's forms are that bench's small ones, not the DAGs')."""
    from datamind.agent.params import RolloutParams
    from datamind.judge.params import JudgeParams
    from datamind.profile.params import ProfileParams
    from datamind.publish.params import PublishParams
    from datamind.synth.params import SynthParams

    types = {"profile": ProfileParams, "synth": SynthParams, "rollout": RolloutParams, "judge": JudgeParams}
    return types.get(stage, PublishParams).from_form(form)


def plan(stage: str, root, src: Path, form: dict) -> list[dict]:
    """The stage's planner as its DAG calls it (no mapping limit: every shard of the default size)."""
    if stage == "ingest":
        from datamind.ingest.sources import list_source_files
        from datamind.ingest.stage import plan_ingest

        return plan_ingest(root, list_source_files(str(src)), "bench", form.get("shard_size", INGEST_SHARD))
    if stage == "publish":
        return [{"publish": True}]  # publishing has no plan: it streams every judged row into one release
    params = _params(stage, form)
    if stage == "profile":
        from datamind.profile.stage import plan_profile

        return plan_profile(root, params.shard_size)
    planner = {
        "synth": "datamind.synth.stage:plan_synthesis",
        "rollout": "datamind.rollout.stage:plan_sampling",
        "judge": "datamind.judge.stage:plan_judging",
    }[stage]
    module, _, name = planner.partition(":")
    return getattr(importlib.import_module(module), name)(root, params.shard_size, params)


def process(stage: str, root, spec: dict, run_id: str, form: dict) -> dict:
    """One shard of the stage as its mapped task runs it."""
    if stage == "ingest":
        from datamind.ingest.stage import ingest_shard

        return ingest_shard(root, spec, None, run_id)
    params = _params(stage, form)
    if stage == "profile":
        from datamind.profile.stage import profile_shard

        return profile_shard(root, spec, run_id)
    if stage == "synth":
        from datamind.synth.stage import synthesize_shard

        return synthesize_shard(root, spec, params, run_id)
    if stage == "rollout":
        from datamind.rollout.stage import sample_shard

        return sample_shard(root, spec, params, run_id)
    if stage == "judge":
        from datamind.judge.stage import judge_shard

        return judge_shard(root, spec, params, run_id)
    from datamind.publish.stage import publish_dataset

    return publish_dataset(root, run_id, params)


# The DAG whose publish task finalises each stage (the stage catalog names the table it validates).
DAG_OF = {
    "ingest": "ingest_files",
    "profile": "profile_files",
    "synth": "synthesize_queries",
    "rollout": "sample_trajectories",
    "judge": "judge_trajectories",
}


def _shard(args: tuple) -> dict:
    stage, root_dir, spec, run_id, params = args
    from datamind.storage import DataRoot

    return process(stage, DataRoot(root_dir), spec, run_id, params)


def _finalise(stage: str, root, summaries: list[dict], run_id: str) -> None:
    from datamind.assets import DIRS
    from datamind.pipeline import finalize_stage
    from datamind.stages import STAGES as CATALOG
    from datamind.stages import contract

    if stage == "publish":
        return  # publishing validates its release inside publish_dataset
    writes = CATALOG[DAG_OF[stage]].writes
    label = "ingest_bench" if stage == "ingest" else DAG_OF[stage]  # ingest reports per source
    finalize_stage(root, contract(writes), label, summaries, run_id, rel_dir=DIRS[writes])


@contextlib.contextmanager
def _sandbox_calls():
    """Time every sandbox call of the profiled shard (its sandbox runs in other processes, which cProfile
    does not see): the first cell of a session starts its interpreter, later cells reuse it (live mode)."""
    from datamind.sandbox.session import Session

    calls: dict[str, list[float]] = {"first cell (starts the interpreter)": [], "later cells": [], "close": []}
    run, close = Session.run, Session.close

    def timed_run(self, code):
        t = time.perf_counter()
        try:
            return run(self, code)
        finally:
            key = "later cells" if getattr(self, "_bench_ran", False) else "first cell (starts the interpreter)"
            calls[key].append(time.perf_counter() - t)
            self._bench_ran = True

    def timed_close(self):
        t = time.perf_counter()
        try:
            return close(self)
        finally:
            calls["close"].append(time.perf_counter() - t)

    Session.run, Session.close = timed_run, timed_close
    try:
        yield calls
    finally:
        Session.run, Session.close = run, close


def _calls_table(calls: dict[str, list[float]], shard_s: float) -> str:
    lines = [f"sandbox calls of that shard ({shard_s:.1f} s; calls overlap on the shard's exec_workers threads):"]
    lines.append(f"  {'call':<38} {'n':>5} {'total s':>8} {'median ms':>10} {'p90 ms':>8}")
    for name, v in calls.items():
        if v:
            med, p90 = 1000 * statistics.median(v), 1000 * sorted(v)[int(0.9 * (len(v) - 1))]
            lines.append(f"  {name:<38} {len(v):>5} {sum(v):8.2f} {med:10.1f} {p90:8.1f}")
    return "\n".join(lines) + "\n\n"


def run_chain(src: Path, work: Path, workers: int, profile: str | None, overrides: dict[str, dict]) -> dict:
    from datamind.storage import DataRoot

    root_dir = work / "root"
    root = DataRoot(str(root_dir))
    seconds: dict[str, float] = {}
    manifest: dict = {}
    profiled = ""
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for stage in STAGES:
            run_id = f"bench-chain-{stage}"
            t0 = time.perf_counter()
            params = overrides.get(stage, {})
            specs = plan(stage, root, src, params)
            jobs = [(stage, str(root_dir), s, run_id, params) for s in specs]
            if stage == "publish":
                manifest = process(stage, root, specs[0], run_id, params)
            else:
                if profile == stage and specs:
                    prof = cProfile.Profile()
                    with _sandbox_calls() as calls:
                        t_shard = time.perf_counter()
                        first = prof.runcall(_shard, jobs[0])
                        t_shard = time.perf_counter() - t_shard
                    out = io.StringIO()
                    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(35)
                    profiled = _calls_table(calls, t_shard) + out.getvalue()
                    summaries = [first, *pool.map(_shard, jobs[1:])]
                else:
                    summaries = list(pool.map(_shard, jobs))
                _finalise(stage, root, summaries, run_id)
            seconds[stage] = time.perf_counter() - t0
            print(f"  {stage:<8} {seconds[stage]:7.1f} s", file=sys.stderr)
    return {"seconds": seconds, "manifest": manifest, "profile": profiled}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("source", type=Path, help="a folder of CSV / XLSX / SQLite files")
    ap.add_argument("--workers", type=int, default=2, help="shards at a time (the DAGs' parallel shards)")
    ap.add_argument("--repeat", type=int, default=1, help="fresh runs; medians are printed")
    ap.add_argument("--profile", choices=STAGES[:-1], help="cProfile the first shard of this stage")
    ap.add_argument(
        "--set", action="append", default=[], metavar="STAGE.KEY=JSON",
        help="a form value other than the default, e.g. rollout.sandbox_mode='\"live\"' (repeatable)",
    )  # fmt: skip
    ap.add_argument("--keep", type=Path, help="keep the data roots under this folder")
    ap.add_argument("--json", default="", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if not args.source.is_dir():
        ap.error(f"{args.source} is not a folder")
    overrides: dict[str, dict] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        stage, _, name = key.partition(".")
        if stage not in STAGES or not name or not value:
            ap.error(f"--set {item!r}: expected STAGE.KEY=JSON with STAGE one of {', '.join(STAGES)}")
        try:
            overrides.setdefault(stage, {})[name] = json.loads(value)
        except json.JSONDecodeError:
            overrides.setdefault(stage, {})[name] = value  # a bare word is a string

    runs = []
    for i in range(args.repeat):
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bench-chain-", dir=args.keep))
        print(f"run {i + 1}/{args.repeat} into {work}", file=sys.stderr)
        t0 = time.perf_counter()
        r = run_chain(args.source, work, args.workers, args.profile if i == 0 else None, overrides)
        r["total"] = time.perf_counter() - t0
        runs.append(r)
        if args.keep is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)

    m = runs[0]["manifest"]
    samples = m.get("n_samples", 0)
    total = statistics.median(r["total"] for r in runs)
    print(f"\nchain over {args.source} ({args.workers} workers, {args.repeat} run(s), medians; settings {overrides})")
    print(f"{'stage':<8} {'seconds':>8} {'share':>7}")
    for stage in STAGES:
        s = statistics.median(r["seconds"][stage] for r in runs)
        print(f"{stage:<8} {s:8.1f} {100 * s / total:6.1f}%")
    print(f"{'total':<8} {total:8.1f}")
    hashes = sorted({r["manifest"].get("content_hash") for r in runs})
    print(f"\nsamples published: {samples} (content hash {', '.join(map(str, hashes))})")
    print(f"samples/s: {samples / total:.2f}")
    if runs[0]["profile"]:
        print(f"\ncProfile of one {args.profile} shard (cumulative):\n{runs[0]['profile']}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "runs": [{"seconds": r["seconds"], "total": r["total"]} for r in runs],
                    "samples": samples,
                    "content_hash": hashes,
                    "source_digest": hashlib.sha256(
                        "\n".join(sorted(p.name for p in args.source.iterdir())).encode()
                    ).hexdigest()[:16],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
