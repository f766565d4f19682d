"""How each stage's cost grows with the corpus: planners and shards at N = 50, 500, 5,000 source files.

    python scripts/bench_scale.py                      # N = 50 500 5000
    python scripts/bench_scale.py --sizes 500 50000    # a season of crawling: 25-50 min, 2.2 GiB on disk, 1.1 GB RSS
    python scripts/bench_scale.py --sizes 30 50 --sample-shards 1 --repeats 2   # what CI runs, so it cannot rot
    python scripts/bench_scale.py --sizes 500 50000 --last-stage profile   # the first stages only: 6-12 min
    python scripts/bench_scale.py --max-shards 0       # every shard of the bench's size, however many

For each size it generates N source files (CSV and XLSX with typed columns: ids, dates, categories, amounts,
counts, ratings with gaps; 20 to 1,000 rows), runs the real pipeline once (offline engine) over a template of
the first few of them, and then gives every stage an input of full size: the template's rows are cloned with
every id rewritten (``stable_id(id, copy)``, the same map in every table, so a cloned query still points at its
cloned table and file). A stage is measured with half of its input already done (the template's output cloned
for the first half of the copies), which is the state a planner meets in a rerun or a backfill:

* the planner: wall time over all input items, and per item; it plans as the DAG's plan task does, within
  Airflow's mapping limit (``--max-shards``, default core.max_map_length's 1,024), so at 50,000 sources a
  shard holds what a deployment's would (with half the work done: 25 tables a synthesis shard, 144 queries a
  sampling or judging one);
* a sample of its shards (real processing of planned work), per item, in a process of their own that is given
  their specs and nothing else, as Airflow runs a mapped task. The sample runs ``--repeats`` times (its writes
  undone after each), the sizes taking turns, and the median is reported with its spread (publishing's one
  shard, the whole release, runs once): a shard of the first stages takes a second or two, and this machine's
  speed drifts by more than the growth being measured, so a single run per size could not tell 1.0 from 1.4;
* the peak RSS of the planner (its own process; the clones are written by the driver beforehand) and of the
  shards' process.

It prints a table per size, then the growth exponent of each planner between consecutive sizes (1.0 is linear,
2.0 quadratic): log(t2 / t1) / log(items2 / items1). It asserts nothing about time; the figures are the output.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from datamind.shards import AIRFLOW_MAX_MAP_LENGTH  # noqa: E402  (include/ is on the path from here on)

STAGES = ("ingest", "profile", "synth", "rollout", "judge", "publish")
# The module whose function runs a shard of each stage (``process``; the shard process imports it up front).
STAGE_MODULES = {
    "ingest": "datamind.ingest.stage",
    "profile": "datamind.profile.stage",
    "synth": "datamind.synth.stage",
    "rollout": "datamind.rollout.stage",
    "judge": "datamind.judge.stage",
    "publish": "datamind.publish.stage",
}
# What one item of a stage's input is, for the per-item figures.
ITEM = {"ingest": "file", "profile": "file", "synth": "table", "rollout": "query", "judge": "query", "publish": "row"}
TEMPLATE_FILES = 24
SYNTH = {"categories": ["aggregation", "ranking", "statistical_analysis"], "queries_per_category": 1}
SYNTH_N_CHAINS = 1
SHARDS = {"ingest": 50, "profile": 50, "synth": 20, "rollout": 10, "judge": 20}
# A plan maps at most Airflow's default core.max_map_length shards (planners raise the shard size to fit), so
# at 50,000 sources a shard holds what a deployment's would. --max-shards 0 keeps the sizes above instead.


# -- source files ---------------------------------------------------------------------------------------------

DOMAINS = {
    "sales": (["store", "region", "product"], ["revenue", "unit_price"], ["units", "returns"]),
    "weather": (["station", "city", "condition"], ["temperature_c", "rainfall_mm"], ["wind_kmh", "humidity_pct"]),
    "clinic": (["ward", "doctor", "diagnosis"], ["bill_eur", "stay_days"], ["age", "visits"]),
    "school": (["school", "district", "subject"], ["score", "attendance_rate"], ["students", "absences"]),
}
LEVELS = {
    "store": 12, "region": 5, "product": 30, "station": 20, "city": 15, "condition": 6, "ward": 8, "doctor": 25,
    "diagnosis": 14, "school": 18, "district": 6, "subject": 9,
}  # fmt: skip


def source_frame(i: int):
    """The i-th source table: the same for every N (seeded by i), so sizes share their first files."""
    import numpy as np
    import pandas as pd

    rng = random.Random(i)
    domain = rng.choice(sorted(DOMAINS))
    cats, floats, ints = DOMAINS[domain]
    n = int(math.exp(rng.uniform(math.log(20), math.log(1000))))
    gen = np.random.default_rng(i)
    cols: dict = {"record_id": np.arange(1, n + 1)}
    start = date(2020, 1, 1) + timedelta(days=rng.randrange(1500))
    cols["date"] = [(start + timedelta(days=int(d))).isoformat() for d in sorted(gen.integers(0, 700, n))]
    for c in rng.sample(cats, rng.randint(1, len(cats))):
        cols[c] = [f"{c.title()} {k}" for k in gen.integers(1, LEVELS[c] + 1, n)]
    for c in floats:
        values = np.round(gen.lognormal(3, 0.8, n), 2)
        if rng.random() < 0.4:
            values[gen.random(n) < 0.05] = np.nan  # a few gaps, as real exports have
        cols[c] = values
    for c in rng.sample(ints, rng.randint(1, len(ints))):
        cols[c] = gen.poisson(rng.uniform(3, 60), n)
    return domain, pd.DataFrame(cols)


def _write_source(folder: Path, i: int) -> None:
    domain, df = source_frame(i)
    stem = f"{domain}_{i:05d}"
    if i % 5 == 4:
        df.to_excel(folder / f"{stem}.xlsx", index=False, sheet_name=domain)
    else:
        df.to_csv(folder / f"{stem}.csv", index=False)


def write_sources(folder: Path, n: int) -> None:
    """The first ``n`` source files, on every core (at N = 50,000 the XLSX writes alone take many minutes)."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    folder.mkdir(parents=True, exist_ok=True)
    if n < 200:
        for i in range(n):
            _write_source(folder, i)
        return
    with ProcessPoolExecutor() as pool:
        list(pool.map(partial(_write_source, folder), range(n), chunksize=100))


# -- the stages, as the DAGs call them ------------------------------------------------------------------------


def _form(stage: str) -> dict:
    """This bench's form for the stage: what a run's conf would carry."""
    if stage == "synth":
        return {**SYNTH, "n_chains": SYNTH_N_CHAINS, "shard_size": SHARDS["synth"]}
    return {"shard_size": SHARDS[stage]} if stage in SHARDS else {}


def _params(stage: str):
    """The stage's parameters built from its form, as the DAG edge builds them (``StageParams.from_form``)."""
    from datamind.agent.params import RolloutParams
    from datamind.judge.params import JudgeParams
    from datamind.profile.params import ProfileParams
    from datamind.publish.params import PublishParams
    from datamind.synth.params import SynthParams

    if stage == "ingest":  # ingest takes its shard size alone
        return None
    types = {"profile": ProfileParams, "synth": SynthParams, "rollout": RolloutParams, "judge": JudgeParams}
    return types.get(stage, PublishParams).from_form(_form(stage))


def plan(stage: str, root, src: Path, max_shards: int | None = AIRFLOW_MAX_MAP_LENGTH) -> list[dict]:
    """The stage's planner as its DAG calls it, with this bench's parameters, under Airflow's mapping limit
    (``max_shards``; None: unlimited, each shard of the size asked for)."""
    params = _params(stage)
    if stage == "ingest":
        from datamind.ingest.sources import list_source_files
        from datamind.ingest.stage import plan_ingest

        return plan_ingest(root, list_source_files(str(src)), "bench", SHARDS["ingest"], max_shards)
    if stage == "profile":
        from datamind.profile.stage import plan_profile

        return plan_profile(root, params.shard_size, max_shards)
    if stage == "synth":
        from datamind.synth.stage import plan_synthesis

        return plan_synthesis(root, params.shard_size, params, max_shards)
    if stage == "rollout":
        from datamind.rollout.stage import plan_sampling

        return plan_sampling(root, params.shard_size, params, max_shards)
    if stage == "judge":
        from datamind.judge.stage import plan_judging

        return plan_judging(root, params.shard_size, params, max_shards)
    return [{"publish": True}]  # publishing has no plan: it streams every judged row into one release


def process(stage: str, root, spec: dict, run_id: str) -> dict:
    """One shard of the stage as its mapped task runs it."""
    params = _params(stage)
    stage_module = importlib.import_module(STAGE_MODULES[stage])
    if stage == "ingest":
        return stage_module.ingest_shard(root, spec, None, run_id)
    if stage == "profile":
        return stage_module.profile_shard(root, spec, run_id)
    if stage == "synth":
        return stage_module.synthesize_shard(root, spec, params, run_id)
    if stage == "rollout":
        return stage_module.sample_shard(root, spec, params, run_id)
    if stage == "judge":
        return stage_module.judge_shard(root, spec, params, run_id)
    return stage_module.publish_dataset(root, run_id, params)


def spec_items(stage: str, spec: dict) -> int:
    for key in ("files", "table_ids", "query_ids"):
        if key in spec:
            return len(spec[key])
    return 0


# -- cloning a stage's output ----------------------------------------------------------------------------------

CLONED_DIRS = ("catalog", "queries", "trajectories", "judged", "rejections", "synthesis")


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _is_id_column(name: str) -> bool:
    return name.endswith("_id") or name.endswith("_ids") or name == "duplicate_of"


def clone_files(root: Path, rels: list[str], copies: range, ids: set[str]) -> None:
    """Write copy ``c`` of each file for every c in ``copies``, ids rewritten as ``stable_id(id, c)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datamind.ids import stable_id

    def remap(value, c):
        if isinstance(value, str):
            if value in ids:
                return stable_id(value, c)
            # a commit record names its shard's files: the copy's record names the copies
            head, sep, tail = value.rpartition("/part-")
            if sep and tail.endswith(".parquet"):
                return f"{head}{sep}{tail.removesuffix('.parquet')}c{c}.parquet"
            return value
        if isinstance(value, list):
            return [remap(v, c) for v in value]
        if isinstance(value, dict):
            return {k: remap(v, c) for k, v in value.items()}
        return value

    for rel in rels:
        path = root / rel
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            id_cols = [n for n in table.column_names if _is_id_column(n)]
            columns = {n: table.column(n).to_pylist() for n in id_cols}
        else:
            doc = json.loads(path.read_text())
        for c in copies:
            head, _, rest = path.name.partition(".")  # part-<id>.summary.json -> part-<id>c<copy>.summary.json
            out = path.with_name(f"{head}c{c}.{rest}")
            if path.suffix == ".parquet":
                t = table
                for n in id_cols:
                    t = t.set_column(
                        t.schema.get_field_index(n), t.schema.field(n), pa.array(remap(columns[n], c), t.column(n).type)
                    )
                pq.write_table(t, out)
            else:
                out.write_text(json.dumps(remap(doc, c)))


def template_ids(root: Path) -> set[str]:
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for p in root.rglob("*.parquet"):
        if not any(p.relative_to(root).as_posix().startswith(d) for d in CLONED_DIRS):
            continue
        t = pq.read_table(p)
        for n in t.column_names:
            if _is_id_column(n) and t.schema.field(n).type == "string":
                ids.update(v for v in t.column(n).to_pylist() if v)
    return ids


def cloneable(rels: list[str]) -> list[str]:
    return [
        r
        for r in rels
        if r.split("/")[0] in CLONED_DIRS and r.endswith((".parquet", ".json")) and not r.endswith("params.json")
        and "PROTOCOL" not in r
    ]  # fmt: skip


# -- one stage in its own process -------------------------------------------------------------------------------


def child(args) -> None:
    """Time this stage's planner over the root as it stands and write the specs of a sample of its shards
    (``sample-<stage>.json`` beside the root). Prints one JSON line."""
    from datamind.storage import DataRoot

    root_dir = Path(args.root)
    root = DataRoot(str(root_dir))
    stage = args.stage
    _reset_peak_rss()  # the planner's own high-water mark, not the imports'
    t0 = time.perf_counter()
    specs = plan(stage, root, root_dir.parent / "src", max_shards=args.max_shards or None)
    plan_rss_mb = _peak_rss_mb()
    t_plan = time.perf_counter() - t0
    items = sum(spec_items(stage, s) for s in specs) if stage != "publish" else _judged_rows(root_dir)
    sampled = specs[: args.sample_shards]
    (root_dir.parent / f"sample-{stage}.json").write_text(json.dumps(sampled))
    print(
        json.dumps(
            {
                "peak_rss_mb": plan_rss_mb,
                "stage": stage,
                "planned_items": items,
                "plan_s": t_plan,
                "specs": len(specs),
                "shards": len(sampled),
                "shard_items": sum(spec_items(stage, s) for s in sampled) if stage != "publish" else items,
            }
        )
    )


def shard_child(args) -> None:
    """The sampled shards, in a process that holds nothing but their specs: as Airflow runs a mapped task, so
    the planner's memory (50,000 specs at the largest size) is not in the way of what is timed."""
    from datamind.storage import DataRoot

    root = DataRoot(args.root)
    specs = json.loads(Path(args.specs).read_text())
    # A process pays its imports once, whatever the corpus: done before the clock starts, so that a fixed cost
    # does not dilute the per-item figures the sizes are compared by.
    for module in ("pandas", "pyarrow.parquet", STAGE_MODULES[args.shards]):
        importlib.import_module(module)
    t0 = time.perf_counter()
    for spec in specs:
        process(args.shards, root, spec, f"bench-{args.shards}")
    seconds = time.perf_counter() - t0
    items = sum(spec_items(args.shards, spec) for spec in specs)
    print(json.dumps({"seconds": seconds, "items": items, "peak_rss_mb": _peak_rss_mb()}))


def _judged_rows(root_dir: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in (root_dir / "judged").rglob("*.parquet"))


def _reset_peak_rss() -> None:
    """Start VmHWM afresh at the current RSS (Linux's clear_refs "5"); elsewhere it keeps the earlier peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def status_mb(field: str) -> float | None:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM) in MB; None off Linux."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith(f"{field}:")), None)


def _peak_rss_mb() -> float:
    """This process's own high-water RSS (VmHWM starts afresh at exec, unlike ru_maxrss, which keeps the
    parent's peak across fork and exec)."""
    peak = status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *argv], stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- the template: the real pipeline over the first files -------------------------------------------------------


def build_template(base: Path, n_files: int) -> dict:
    """Run every stage for real over the first ``n_files`` sources (the same at every N); record which
    files each stage wrote."""
    from datamind.storage import DataRoot

    src = base / "src"
    write_sources(src, n_files)
    root_dir = base / "root"
    root = DataRoot(str(root_dir))
    outputs: dict[str, list[str]] = {}
    for stage in STAGES[:-1]:
        before = _files(root_dir) if root_dir.exists() else set()
        for spec in plan(stage, root, src):
            process(stage, root, spec, f"template-{stage}")
        outputs[stage] = cloneable(sorted(_files(root_dir) - before))
    # ingest's own clones would be files it never saw; its planner lists the real N files instead
    outputs.pop("ingest")
    (base / "ids.json").write_text(json.dumps(sorted(template_ids(root_dir))))
    return outputs


def prepare(n: int, base: Path, outputs: dict, ids: set[str], template_files: int, keep: Path | None) -> Size:
    """A work folder for N = ``n``: its N source files and a copy of the template's data root."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-scale-{n}-", dir=keep))
    t0 = time.perf_counter()
    write_sources(work / "src", n)
    print(f"N={n}: {n} source files written in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    shutil.copytree(base / "root", work / "root")
    return Size(n, work, max(2, math.ceil(n / template_files)), outputs, ids)


class Size:
    """One size's work folder, and its stage's input cloned in halves around the measurements."""

    def __init__(self, n: int, work: Path, copies: int, outputs: dict, ids: set[str]):
        self.n, self.work, self.root = n, work, work / "root"
        self.copies, self.outputs, self.ids = copies, outputs, ids
        self.half = max(1, copies // 2)

    def clone(self, stage: str, first_half: bool) -> None:
        if stage == "profile" and first_half:  # the catalog of files is every later stage's first input
            rels = [r for r in cloneable(sorted(_files(self.root))) if r.startswith("catalog/files")]
            clone_files(self.root, rels, range(1, self.copies), self.ids)
        copies = range(1, self.half) if first_half else range(self.half, self.copies)
        clone_files(self.root, self.outputs.get(stage, []), copies, self.ids)

    def plan(self, stage: str, sample_shards: int, max_shards: int) -> dict:
        argv = ["--child", stage, "--root", str(self.root), "--sample-shards", str(sample_shards)]
        row = run_child([*argv, "--max-shards", str(max_shards)])
        items = row["planned_items"]
        # the planner saw the done half too: its input is all copies
        row["input_items"] = (
            len(list((self.work / "src").iterdir()))
            if stage == "ingest"
            else items
            if stage == "publish"
            else items * self.copies // (self.copies - self.half)
        )
        return row

    def run_sample(self, stage: str, before: set[str]) -> dict:
        """The sampled shards once, in a process of their own; their writes are measured, then undone, so the
        next repeat meets the same state."""
        specs = self.work / f"sample-{stage}.json"
        out = run_child(["--shards", stage, "--root", str(self.root), "--specs", str(specs)])
        for rel in _files(self.root) - before:
            (self.root / rel).unlink()
        return out


def measure(sizes: dict[int, Size], stages: tuple[str, ...], sample_shards: int, repeats: int, max_shards: int):
    """Every stage at every size. Within a stage the sampled shards run ``repeats`` times, the sizes taking
    turns (ABBA...), so a drift of the machine's speed during the run falls on every size alike."""
    results: dict[int, list[dict]] = {n: [] for n in sizes}
    for stage in stages:
        rows, before = {}, {}
        for n, size in sizes.items():
            size.clone(stage, first_half=True)
            rows[n] = size.plan(stage, sample_shards, max_shards)
            rows[n]["shard_runs"], rows[n]["shard_rss_mb"] = [], 0.0
            before[n] = _files(size.root)
        # publishing's one shard is the whole release: minutes at 50,000 sources, long enough to need no repeat
        for r in range(1 if stage == "publish" else repeats):
            for n in sizes if r % 2 == 0 else reversed(sizes):
                out = sizes[n].run_sample(stage, before[n])
                rows[n]["shard_runs"].append(out["seconds"])
                rows[n]["shard_rss_mb"] = max(rows[n]["shard_rss_mb"], out["peak_rss_mb"])
        for n, size in sizes.items():
            rows[n]["shard_s"] = statistics.median(rows[n]["shard_runs"])
            size.clone(stage, first_half=False)
            results[n].append(rows[n])
        print(f"{stage} measured at every size", file=sys.stderr)
    for n, size in sizes.items():
        files = [p for p in size.work.rglob("*") if p.is_file()]
        print(f"N={n}: {len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.0f} MiB on disk",
              file=sys.stderr)  # fmt: skip
    return results


# -- report ------------------------------------------------------------------------------------------------------


def report(results: dict[int, list[dict]]) -> None:
    print()
    print(f"{'N':>6} {'stage':<8} {'items':>7} {'plan s':>8} {'plan ms/item':>12} {'shards':>6} {'shard items':>11} "
          f"{'shard ms/item':>13} {'spread %':>8} {'plan RSS MB':>11} {'shard RSS MB':>12}")  # fmt: skip
    for n, rows in results.items():
        for r in rows:
            items = r["input_items"] or 1
            per_shard = 1000 * r["shard_s"] / r["shard_items"] if r["shard_items"] else float("nan")
            spread = 100 * (max(r["shard_runs"]) - min(r["shard_runs"])) / r["shard_s"] if r["shard_s"] else 0.0
            print(
                f"{n:>6} {r['stage']:<8} {r['input_items']:>7} {r['plan_s']:>8.3f} {1000 * r['plan_s'] / items:>12.3f}"
                f" {r.get('specs', 0):>6} {r['shard_items']:>11} {per_shard:>13.2f} {spread:>8.0f}"
                f" {r['peak_rss_mb']:>11.0f} {r['shard_rss_mb']:>12.0f}"
            )
    repeats = max(len(r["shard_runs"]) for rows in results.values() for r in rows)
    print(
        f"\nshard ms/item: the median of {repeats} runs of the same sampled shards (publishing: one run);"
        " spread: (max - min) / median"
    )
    sizes = sorted(results)
    if len(sizes) > 1:
        print(
            "\nbetween sizes: planner growth exponent (1.0 = linear, 2.0 = quadratic), and the shard ms/item ratio"
            " (of the medians; in brackets, the lowest and highest of the ratios of runs made side by side):"
        )
        for stage in [r["stage"] for r in results[sizes[0]]]:
            parts = []
            for a, b in pairwise(sizes):
                ra = next(r for r in results[a] if r["stage"] == stage)
                rb = next(r for r in results[b] if r["stage"] == stage)
                if (
                    stage != "publish"
                    and ra["plan_s"] > 0
                    and ra["input_items"]
                    and rb["input_items"] > ra["input_items"]
                ):
                    k = math.log(rb["plan_s"] / ra["plan_s"]) / math.log(rb["input_items"] / ra["input_items"])
                    parts.append(f"{a}->{b}: exponent {k:.2f}")
                if ra["shard_items"] and rb["shard_items"] and ra["shard_s"] > 0:
                    ratio = (rb["shard_s"] / rb["shard_items"]) / (ra["shard_s"] / ra["shard_items"])
                    paired = [
                        (tb / rb["shard_items"]) / (ta / ra["shard_items"])
                        for ta, tb in zip(ra["shard_runs"], rb["shard_runs"], strict=True)
                        if ta > 0
                    ]
                    parts.append(f"{a}->{b}: shard ratio {ratio:.2f} [{min(paired):.2f}-{max(paired):.2f}]")
            print(f"  {stage:<8} " + ", ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 500, 5000], help="numbers of source files")
    ap.add_argument("--sample-shards", type=int, default=2, help="shards processed for real per stage")
    ap.add_argument(
        "--repeats", type=int, default=3, help="runs of each stage's sampled shards, the sizes taking turns"
    )
    ap.add_argument("--template-files", type=int, default=TEMPLATE_FILES, help="files the real pipeline runs over")
    ap.add_argument("--keep", type=Path, help="keep the generated data roots under this folder")
    ap.add_argument("--last-stage", choices=STAGES, default=STAGES[-1], help="measure the stages up to this one")
    ap.add_argument(
        "--max-shards",
        type=int,
        default=AIRFLOW_MAX_MAP_LENGTH,
        help="shards one plan may map (Airflow's core.max_map_length); 0: no limit, the shard sizes as asked",
    )
    ap.add_argument("--child", choices=STAGES, dest="stage", help=argparse.SUPPRESS)
    ap.add_argument("--shards", choices=STAGES, help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--specs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:
        child(args)
        return
    if args.shards:
        shard_child(args)
        return
    base = Path(tempfile.mkdtemp(prefix="bench-scale-template-", dir=args.keep))
    sizes: dict[int, Size] = {}
    try:
        t0 = time.perf_counter()
        outputs = build_template(base, args.template_files)
        print(
            f"template: the pipeline over {args.template_files} files in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
        ids = set(json.loads((base / "ids.json").read_text()))
        for n in sorted(set(args.sizes)):
            sizes[n] = prepare(n, base, outputs, ids, args.template_files, args.keep)
        t0 = time.perf_counter()
        stages = STAGES[: STAGES.index(args.last_stage) + 1]
        results = measure(sizes, stages, args.sample_shards, args.repeats, args.max_shards)
        print(f"measured in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
            for size in sizes.values():
                shutil.rmtree(size.work, ignore_errors=True)
    report(results)
    print(f"\npeak RSS of this driver (template and clones): {_peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
