"""What publishing a release costs as it grows: seconds and peak RSS per phase, at several release sizes.

    python scripts/bench_publish.py                          # releases of 30,000 and 150,000 rows: ~5 min
    python scripts/bench_publish.py --rows 30000 300000      # a season's release: ~10 min, 0.5 GB of judged rows
    python scripts/bench_publish.py --rows 200 400 --template-files 4   # what CI runs, so it cannot rot

The real pipeline (offline engine) runs once over ``--template-files`` generated source files (bench_scale's
template). Its judged rows are then cloned into a judged table of each size, in shards of 300 rows as judging
writes them, each clone with its own sample and query ids; each sample's first thought gets
``--unique-sentences`` sentences of its own words, as a real model's text would (the offline engine's
templates repeat, which would hide what the audit keeps per distinct sentence). Each size is published in a
process of its own, which prints its seconds and its peak RSS in each phase:

* screen: the judged rows read a few shards at a time, filtered, audited and spilled to sorted runs;
* merge + write: the runs merged back in sample_id order into the release's parts;
* figures + card: the cost figures, the audit's figures, the card and the manifest.

The last line is what each row added to the peak between the smallest and the largest size: the part of
publishing's memory that grows with the release. It asserts nothing; the figures are the output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import TEMPLATE_FILES, build_template, status_mb  # noqa: E402  (the same template as the scale bench)

SHARD_ROWS = 300
WORDS = [a + b for a in ("al", "be", "ko", "mi", "ru", "sa", "te", "vo") for b in ("ran", "dex", "lio", "mos", "nak")]


def judged_table(template_root: Path, out: Path, n: int, unique_sentences: int) -> None:
    """``out``: a data root whose judged table holds ``n`` clones of the template's judged rows (and the
    template's staged files, hard-linked, for the release to carry)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((template_root / "judged").rglob("part-*.parquet"))
    rows = [r for p in files for r in pq.read_table(p).to_pylist()]
    schema = pq.read_schema(files[0])
    for folder in ("raw", "catalog", "queries"):
        if (template_root / folder).exists():
            shutil.copytree(template_root / folder, out / folder, copy_function=os.link)
    (out / "judged").mkdir(parents=True)
    rng = random.Random(n)
    shard: list[dict] = []
    for i in range(n):
        row = dict(rows[i % len(rows)])
        row.update(sample_id=f"{i * 2654435761 % 2**64:016x}", query_id=f"q{i:09d}", trajectory_id=f"t{i:09d}")
        messages = [dict(m) for m in row["messages"]]
        for m in messages:
            if m["role"] == "assistant" and "<think>" in m["content"]:
                own = " ".join(
                    f"Checking the {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)} column."
                    for _ in range(unique_sentences)
                )
                m["content"] = m["content"].replace("<think>", f"<think>{own} ", 1)
                break
        row["messages"] = messages
        shard.append(row)
        if len(shard) == SHARD_ROWS or i == n - 1:
            pq.write_table(pa.Table.from_pylist(shard, schema), out / "judged" / f"part-{i // SHARD_ROWS:06d}.parquet")
            shard = []


def child(root: str) -> None:
    """Publish ``root``'s judged rows; print one JSON line: seconds, samples, content hash, peak RSS by phase."""
    from datamind.publish import stage

    phase, peaks = ["start"], {}

    def note() -> None:
        peaks[phase[0]] = max(peaks.get(phase[0], 0.0), status_mb("VmRSS") or 0.0)

    def enter(name: str) -> None:  # read at both ends too: a short phase may fall between two samples
        note()
        phase[0] = name
        note()

    def sample() -> None:
        while True:
            note()
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    screen, parts = stage._screen, stage._parts_in_order

    def timed_screen(*args, **kwargs):
        enter("screen")
        return screen(*args, **kwargs)

    def timed_parts(*args, **kwargs):
        enter("merge + write")
        yield from parts(*args, **kwargs)
        enter("figures + card")

    stage._screen, stage._parts_in_order = timed_screen, timed_parts
    t0 = time.perf_counter()
    manifest = stage.publish_dataset(root, "bench-publish")
    seconds = time.perf_counter() - t0
    note()
    out = {"seconds": seconds, "samples": manifest["n_samples"], "content": manifest["content_hash"], "peaks": peaks}
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[30_000, 150_000], help="release sizes (judged rows)")
    ap.add_argument("--unique-sentences", type=int, default=5, help="sentences of its own in each sample's thought")
    ap.add_argument("--template-files", type=int, default=TEMPLATE_FILES, help="files the real pipeline runs over")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    try:
        t0 = time.perf_counter()
        build_template(work / "template", args.template_files)
        print(f"template: the pipeline over {args.template_files} files in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)  # fmt: skip
        results = {}
        for n in sorted(set(args.rows)):
            root = work / f"rows-{n}"
            judged_table(work / "template" / "root", root, n, args.unique_sentences)
            proc = subprocess.run([sys.executable, __file__, "--child", str(root)], stdout=subprocess.PIPE,
                                  text=True, check=True)  # fmt: skip
            results[n] = json.loads(proc.stdout.strip().splitlines()[-1])
            shutil.rmtree(root)
            print(f"{n} rows published", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    phases = ["screen", "merge + write", "figures + card"]
    print(f"\n{'rows':>8} {'samples':>8} {'seconds':>8} {'ms/row':>7} {'peak RSS MB':>11}  " + "  ".join(phases))
    for n, r in results.items():
        peaks = r["peaks"]
        head = f"{n:>8} {r['samples']:>8} {r['seconds']:>8.1f} {1000 * r['seconds'] / n:>7.2f}"
        print(f"{head} {max(peaks.values()):>11.0f}  " + "  ".join(f"{peaks.get(p, 0):>{len(p)}.0f}" for p in phases))
    sizes = sorted(results)
    if len(sizes) > 1:
        a, b = results[sizes[0]], results[sizes[-1]]
        grown = (max(b["peaks"].values()) - max(a["peaks"].values())) * 2**20 / (sizes[-1] - sizes[0])
        print(f"\npeak RSS added per row from {sizes[0]} to {sizes[-1]} rows: {grown:.0f} bytes")


if __name__ == "__main__":
    main()
