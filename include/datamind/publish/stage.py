"""Publish the training dataset: ``judged`` -> rule filters -> ``dataset/v<N>/part-XXXXX.parquet`` + manifest.

The release is a pure function of the judged rows of one judging configuration (``judged/params=<fp>``):
filter (recording every drop in ``rejections/filter``), de-duplicate by ``sample_id``, sort by ``sample_id``,
cut into shards of ``shard_rows``.  The judged rows stream through: they are screened a batch at a time
and the kept ones spilled to local disk in sorted runs, then merged back in order, so memory holds a
batch and a part, not the dataset.  Its content hash covers the sample ids (and the schema version); when the
newest complete release already has that hash nothing is written.  Otherwise the next ``v<N>`` is
filled shard by shard (each write atomic) and ``manifest.json`` is written last: a release without a
manifest is incomplete, readers must ignore it, and the next run reuses and overwrites that same
``v<N>`` (deleting any stray shard or temporary file), so a killed publish never leaves a partial or
duplicated shard behind.  ``dataset/LATEST`` names the newest complete version.  Judged rows of which none
is publishable write and promote nothing: when no release holds any of them either, publishing raises
``NothingToPublish``, naming the stage that produced nothing and its rejections by reason.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
import logging
import os
import posixpath
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamind import tables
from datamind.assets import DIRS
from datamind.filters.rules import FilterConfig, apply_filters
from datamind.filters.tokenizer import tokenizer_name
from datamind.llm.config import prices_from_env
from datamind.publish import card, changes, meaning, promotion
from datamind.publish.audit import AuditTally, Synthesised
from datamind.publish.cost import release_cost
from datamind.publish.params import PublishParams
from datamind.schemas import DATASET, REJECTIONS, rejection
from datamind.shards import column_counts, read_table, table_to_parquet_bytes
from datamind.stages import ITEM_COLUMN, PIPELINE, STAGES
from datamind.storage import DataRoot
from datamind.tables import CARD, MANIFEST, judged_partitions, read_manifest, versions

log = logging.getLogger(__name__)

STAGE = STAGES["publish_dataset"].rejections


def part_name(i: int) -> str:
    return f"part-{i:05d}.parquet"


def content_version(sample_ids: list[str], held_out: frozenset[str] = frozenset()) -> str:
    """Same samples on the same sides of the split: same content (and no new release)."""
    h = hashlib.sha256(f"dataset-schema={DATASET.version}\nheld_out={','.join(sorted(held_out))}\n".encode())
    for sid in sorted(sample_ids):
        h.update(sid.encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _sources(root: DataRoot, p: PublishParams) -> list[tuple[str, str | None]]:
    """The judged partitions a release is screened from: one, or every one with ``mix_partitions``."""
    if p.mix_partitions and p.judged_partition is None and len(parts := judged_partitions(root)) > 1:
        return [(posixpath.join(DIRS["judged"], part), part) for part in parts]
    return [_source(root, p.judged_partition)]


def _source(root: DataRoot, partition: str | None) -> tuple[str, str | None]:
    parts = judged_partitions(root)
    if partition is not None:
        if partition not in parts:
            raise ValueError(f"judged partition {partition!r} not found; available: {parts}")
        return posixpath.join(DIRS["judged"], partition), partition
    if len(parts) > 1:
        raise ValueError(
            f"several judged partitions {parts} (different judging settings): pass judged_partition=, "
            "or mix_partitions=True to publish them together"
        )
    if parts:
        return posixpath.join(DIRS["judged"], parts[0]), parts[0]
    return DIRS["judged"], None


def _duplicate_rejection(row: dict, first: str | None, run_id: str | None, now: datetime) -> dict:
    return rejection(
        STAGE,
        row["sample_id"],
        DUPLICATE_QUERY,
        f"its query was judged in an earlier partition too (partitions in name order from {first}); "
        "the release keeps that partition's samples",
        file_id=row.get("file_id"),
        query_id=row.get("query_id"),
        raw=row.get("final_answer") or "",
        run_id=run_id,
        created_at=now,
    )


def _filter_rejection(row: dict, finding, run_id: str | None, now: datetime) -> dict:
    return rejection(
        STAGE,
        row["sample_id"],
        f"{finding.rule}:{finding.code}",
        finding.reason,
        file_id=row.get("file_id"),
        query_id=row.get("query_id"),
        raw=row.get("final_answer") or "",
        run_id=run_id,
        created_at=now,
    )


@dataclass
class _Screened:
    """What screening the judged rows of one partition leaves: the kept rows' light fields (an Arrow table
    sorted by sample_id: a few dozen bytes a row, where a dict per row took about a KB), the rejections (an
    Arrow table sorted by item), and the local files holding the kept rows whole. (The audit tallies the rows
    as the release is written: a file's share cap drops some after screening.)"""

    partition: str | None
    judge_params: dict | None
    n_judged: int
    kept: pa.Table
    rejections: pa.Table
    spilled: list[str]


# What the manifest and the card read of a kept row; the rows themselves stay in the spill files.
_LIGHT = pa.schema(
    DATASET.schema.field(k)
    for k in ("sample_id", "query_id", "file_id", "data_uri", "category", "hop", "answer_check", "selection_strategy")
)
# Judged rows screened together: enough to batch the tokenizer and write few spill files, few enough to
# keep memory flat (a row with its trajectory is tens of KB in Python).
_SCREEN_ROWS = 2_000
_SPILL_GROUP_ROWS = 32  # rows the merge decodes at a time from each spill file
# Spill files merged at once: each open one costs 3-6 MB (its metadata and a decoded group), and a release of
# 300,000 rows spills about 150.
_MERGE_FAN_IN = 16


class _Screener:
    """Filters judged rows a batch at a time: the rule filters, then a readable data file. Kept rows go whole
    to a sorted spill file; memory keeps their light fields and the rejections."""

    def __init__(self, root: DataRoot, config: FilterConfig, spill: str, run_id: str | None, now: datetime):
        self.root, self.config, self.spill, self.run_id, self.now = root, config, spill, run_id, now
        self.readable: dict[str, str | None] = {}  # data uri -> why it cannot be read (None: readable)
        self.light: list[pa.Table] = []
        self.rejections: list[pa.Table] = []  # a batch's at a time: a drop record carries the row's answer
        self.spilled: list[str] = []

    def screen(self, batch: list[dict]) -> None:
        kept, dropped = apply_filters(batch, self.config)
        kept, missing = _with_readable_data(self.root, kept, self.readable)
        records = [_filter_rejection(r, f, self.run_id, self.now) for r, f in dropped]
        records += [_missing_rejection(r, why, self.run_id, self.now) for r, why in missing]
        if records:
            self.rejections.append(REJECTIONS.to_table(records))
        if not kept:
            return
        kept.sort(key=lambda r: r["sample_id"])  # each spill file is a sorted run of the merge
        self.spilled.append(os.path.join(self.spill, f"kept-{len(self.spilled):06d}.parquet"))
        pq.write_table(DATASET.to_table(kept), self.spilled[-1], row_group_size=_SPILL_GROUP_ROWS)
        self.light.append(pa.table({f.name: pa.array([r.get(f.name) for r in kept], f.type) for f in _LIGHT}))


DUPLICATE_QUERY = "duplicate_query"  # a mixed release's query judged in an earlier partition too


def _screen(
    root: DataRoot,
    sources: list[tuple[str, str | None]],
    config: FilterConfig,
    spill: str,
    run_id: str | None,
    now: datetime,
) -> _Screened:
    """Screen the judged rows of the partitions a few shards at a time: the committed ones not seen before
    (reruns of a judging shard rewrite identical ids). Where several are mixed, a query judged in an earlier
    partition gives no samples from a later one: one question, one set of answers, whoever wrote them."""
    screener = _Screener(root, config, spill, run_id, now)
    seen: set[str] = set()
    earlier: set[str] = set()  # query ids of the partitions screened before this one
    duplicates: list[dict] = []
    params: dict[str, dict | None] = {}
    for src, partition in sources:
        here: set[str] = set()
        batch: list[dict] = []
        # the committed rows only: those of a judging shard killed before it committed are out
        for _, shard in tables.each(root, "judged", partition=partition):
            for row in shard.to_pylist():
                if row["sample_id"] in seen:
                    continue
                seen.add(row["sample_id"])
                if row["query_id"] in earlier:
                    duplicates.append(_duplicate_rejection(row, sources[0][1], run_id, now))
                    continue
                here.add(row["query_id"])
                batch.append(row)
            if len(batch) >= _SCREEN_ROWS:
                screener.screen(batch)
                batch = []
        screener.screen(batch)
        earlier |= here
        has_params = root.exists(src, "params.json")
        params[partition or ""] = json.loads(root.read_text(src, "params.json")) if has_params else None
    if duplicates:
        screener.rejections.append(REJECTIONS.to_table(duplicates))
    mixed = len(sources) > 1
    return _Screened(
        partition="+".join(part or "" for _, part in sources) if mixed else sources[0][1],
        judge_params=params if mixed else params[sources[0][1] or ""],
        n_judged=len(seen),
        kept=pa.concat_tables(screener.light or [_LIGHT.empty_table()]).combine_chunks().sort_by("sample_id"),
        rejections=pa.concat_tables(screener.rejections or [REJECTIONS.to_table([])]).sort_by("item_id"),
        spilled=screener.spilled,
    )


def _batches(rows: Iterator[dict], size: int) -> Iterator[list[dict]]:
    part: list[dict] = []
    for row in rows:
        part.append(row)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


def _merge_rows(paths: list[str]) -> Iterator[dict]:
    """The rows of sorted spill files in sample_id order, each file read a row group at a time."""

    def run(path: str) -> Iterator[dict]:
        # one reader per run open at once: no read-ahead buffers, no threads prefetching row groups
        reader = pq.ParquetFile(path, pre_buffer=False)
        for batch in reader.iter_batches(batch_size=_SPILL_GROUP_ROWS, use_threads=False):
            yield from batch.to_pylist()

    return heapq.merge(*(run(path) for path in paths), key=lambda r: r["sample_id"])


def _few_runs(spilled: list[str]) -> list[str]:
    """At most ``_MERGE_FAN_IN`` sorted runs: the oldest are merged into one run, ``_MERGE_FAN_IN`` at a time,
    until few are left (each open run holds a decoded row group: hundreds of them outgrew the screening)."""
    runs = list(spilled)
    merged = 0
    while len(runs) > _MERGE_FAN_IN:
        group, runs = runs[:_MERGE_FAN_IN], runs[_MERGE_FAN_IN:]
        out = os.path.join(os.path.dirname(group[0]), f"merged-{merged:06d}.parquet")
        merged += 1
        with pq.ParquetWriter(out, DATASET.schema) as writer:
            for rows in _batches(_merge_rows(group), _SPILL_GROUP_ROWS):
                writer.write_table(DATASET.to_table(rows))
        for path in group:
            os.remove(path)  # the spill takes the release's size once, not once per pass
        runs.append(out)
    return runs


def _parts_in_order(
    screened: _Screened, shard_rows: int, dropped: frozenset[str] = frozenset()
) -> Iterator[list[dict]]:
    """The spilled rows in sample_id order, ``shard_rows`` at a time: a merge of at most ``_MERGE_FAN_IN``
    sorted runs, so memory holds a row group of each and the part being filled, at any release size.
    ``dropped``: sample ids left out after screening (beyond a file's share, see ``file_share_cap``)."""
    rows = _merge_rows(_few_runs(screened.spilled))
    return _batches((r for r in rows if r["sample_id"] not in dropped) if dropped else rows, shard_rows)


def file_share_cap(per_file: dict[str, int], share: float) -> int | None:
    """The most samples one file may give so that none holds more than ``share`` of the release left after the
    cap (the largest ``m`` with ``m <= share * sum(min(n, m))``); None when no cap applies: ``share`` 1, or too
    few files to meet it (four files at most a quarter each), or no file above it."""
    counts = sorted(per_file.values())
    if share >= 1 or not counts or len(counts) * share < 1:
        return None
    prefix = [0]
    for n in counts:
        prefix.append(prefix[-1] + n)

    def fits(m: int) -> bool:  # share * sum(min(n, m)) - m is concave in m: the m that fit are 1..best
        below = bisect.bisect_left(counts, m)
        return m <= share * (prefix[below] + m * (len(counts) - below))

    lo, hi = 1, counts[-1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return None if lo >= counts[-1] else lo


def _over_file_share(kept: pa.Table, share: float) -> frozenset[str]:
    """The kept samples beyond each file's cap (``file_share_cap``): per file, those last by a hash of their
    sample id, so which samples stay does not depend on the order rows arrived in."""
    per_file = column_counts(kept, "file_id")
    cap = file_share_cap(per_file, share)
    if cap is None:
        return frozenset()
    out: set[str] = set()
    for fid, n in per_file.items():
        if n > cap:
            ids = kept.filter(pc.equal(kept["file_id"], fid))["sample_id"].to_pylist()
            ranked = sorted(ids, key=lambda s: (hashlib.sha256(f"cap|{s}".encode()).digest(), s))
            out.update(ranked[cap:])
    return frozenset(out)


def publish_dataset(
    root: DataRoot | str,
    run_id: str | None,
    params: PublishParams | None = None,
    **overrides,
) -> dict:
    """Filter the judged rows and publish them as a new dataset version; returns its manifest.

    ``params`` (None: the defaults), or keyword overrides of its fields (e.g. ``shard_rows=100``):
    ``judged_partition`` picks one judging configuration (``params=<fp>``); it may be omitted when there is only
    one, or when ``mix_partitions`` publishes them all together.
    """
    p = PublishParams() if params is None else PublishParams.given(params)
    p = replace(p, **overrides) if overrides else p
    root = DataRoot.of(root)
    t0 = time.perf_counter()
    now = datetime.now(UTC)
    sources = _sources(root, p)
    # Rows are screened a few judged shards at a time and the kept ones spilled to local disk in sorted runs,
    # then merged back in sample_id order: memory holds a batch and a release part, not the dataset.
    _sweep_dead_spills()
    with tempfile.TemporaryDirectory(prefix=f"{_SPILL_PREFIX}{os.getpid()}-") as spill:
        return _publish_screened(
            root, run_id, p, _screen(root, sources, p.filter_config(), spill, run_id, now), now, t0
        )


_SPILL_PREFIX = "datamind-publish-"


def _sweep_dead_spills() -> None:
    """Delete the spill folders of publishes that were killed (their process is gone): nothing else removes
    them, and at 300,000 rows one holds about the release's compressed size. A folder names its process."""
    base = tempfile.gettempdir()
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        pid = entry.name.removeprefix(_SPILL_PREFIX).split("-", 1)[0]
        if not entry.name.startswith(_SPILL_PREFIX) or not pid.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or not entry.is_dir(follow_symlinks=False):
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            log.info("removing the spill of a killed publish (process %s): %s", pid, entry.path)
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:  # alive under another user, or unreadable: not ours to judge
            continue


def _publish_screened(
    root: DataRoot, run_id: str | None, p: PublishParams, screened: _Screened, now: datetime, t0: float
) -> dict:
    shard_rows, test_fraction, partition = p.shard_rows, p.test_fraction, screened.partition
    rejections_file = posixpath.join(DIRS["rejections"], STAGE, f"part-{partition or 'judged'}.parquet")
    rejections = screened.rejections
    kept = screened.kept
    capped = _over_file_share(kept, p.max_file_share)
    if capped:  # a file beyond its share of the release gives no more samples: recorded like every drop
        over = kept.filter(pc.is_in(kept["sample_id"], value_set=pa.array(sorted(capped), pa.string())))
        why = f"its file already gives {p.max_file_share:.0%} of the release's samples (max_file_share)"
        records = [
            rejection(STAGE, r["sample_id"], "file_share_cap", why, file_id=r["file_id"], query_id=r["query_id"],
                      run_id=run_id, created_at=now)
            for r in over.select(["sample_id", "file_id", "query_id"]).to_pylist()
        ]  # fmt: skip
        rejections = pa.concat_tables([rejections, REJECTIONS.to_table(records)]).sort_by("item_id")
        kept = kept.filter(pc.invert(pc.is_in(kept["sample_id"], value_set=over["sample_id"])))
    if rejections.num_rows:  # a pure function of the judged rows: rewritten whole on every publish
        root.write_bytes(rejections_file, table_to_parquet_bytes(rejections))
    elif root.exists(rejections_file):
        root.remove(rejections_file)
    if not kept.num_rows:
        # A rerun over samples an earlier release holds (their data files since removed, say) has nothing new:
        # the same quiet no-op as unchanged content. Otherwise no release shows anything for these inputs.
        held = _release_holding(root, set(rejections["item_id"].to_pylist()))
        if held is not None:
            log.info("no publishable sample; v%s already holds the judged ones: nothing to publish", held["version"])
            return {**held, "unchanged": True}
        latest = read_manifest(root)
        kept_as = f"dataset/LATEST stays v{latest['version']}" if latest else "there is no release yet"
        raise NothingToPublish(f"nothing to publish, no release written ({kept_as}): {why_nothing(root, screened)}")
    per_file = column_counts(kept, "file_id")
    held_out = card.held_out_files(per_file, test_fraction, p.min_test_files, _multi_table_files(root, per_file))
    # the release's own view of each row: its split (every sample of a held-out file is a test sample)
    is_test = pc.is_in(kept["file_id"], value_set=pa.array(sorted(held_out), pa.string()))
    kept = kept.append_column(DATASET.schema.field("split"), pc.if_else(is_test, "test", "train"))
    digest = content_version(kept["sample_id"].to_pylist(), held_out)

    existing = versions(root)
    latest = read_manifest(root)
    if latest and latest.get("content_hash") == digest:
        log.info("dataset unchanged (content %s): keeping v%s", digest, latest["version"])
        return {**latest, "unchanged": True}
    incomplete = [n for n, ok in existing if not ok and n > (latest["version"] if latest else 0)]
    number = incomplete[0] if incomplete else (max((n for n, _ in existing), default=0) + 1)
    final = posixpath.join(DIRS["dataset"], f"v{number}")
    # Built out of sight, then moved into place whole: a reader of dataset/** never sees a partial release,
    # and a killed publish leaves only a staging folder the next attempt starts afresh.
    vdir = posixpath.join(STAGING, f"v{number}")
    root.remove(vdir)

    sources = _carry_files(root, vdir, kept)
    carried = {s["file_id"]: s["path"] for s in sources}
    names = [part_name(i) for i in range(-(-kept.num_rows // shard_rows))]
    _clear_strays(root, vdir, keep=set(names) | {card.FILES_DIR, CARD})
    shard_info = []
    audit = AuditTally(meaning.load_context(root))  # over the rows the release holds (after the file cap)
    for name, rows in zip(names, _parts_in_order(screened, shard_rows, capped), strict=True):
        for r in rows:
            audit.add(r)
            r["split"] = "test" if r["file_id"] in held_out else "train"
            if r.get("data_uri"):
                r["data_uri"] = carried[r["file_id"]]
        data = table_to_parquet_bytes(DATASET.to_table(rows))
        root.write_bytes(posixpath.join(vdir, name), data)
        shard_info.append({"name": name, "rows": len(rows), "bytes": len(data)})
    written = sum(s["rows"] for s in shard_info)
    if written != kept.num_rows:  # the spill is this run's own: never expected
        raise RuntimeError(f"release v{number}: wrote {written} rows, screened {kept.num_rows}")
    by_reason = column_counts(rejections, "reason_code")  # filters and missing data
    manifest = {
        "version": number,
        "version_id": f"v{number}",  # the one name of this release: folder, exports, Asset events, summaries
        "content_hash": digest,
        "table": DATASET.name,
        "schema_version": DATASET.version,
        "n_samples": kept.num_rows,
        "n_judged": screened.n_judged,
        "n_filtered": rejections.num_rows,
        "filtered_by_reason": dict(sorted(by_reason.items())),
        "by_category": _count(kept, "category"),
        "by_strategy": _count(kept, "selection_strategy"),
        "by_split": _count(kept, "split"),
        "by_answer_check": _count(kept, "answer_check"),
        "test_fraction": test_fraction,
        "min_test_files": p.min_test_files,
        "held_out_files": sorted(held_out),
        "files": {
            s["file_id"]: {"path": s["path"], "sha256": s["sha256"], "bytes": s["bytes"]}
            | ({"row_sample": s["row_sample"]} if s.get("row_sample") else {})
            for s in sources
        },
        "judged_partition": partition,
        "judge_params": screened.judge_params,
        "shards": shard_info,
        "shard_rows": shard_rows,
        "compression": "zstd",
        "answer_tokenizer": tokenizer_name(),
        "created_at": now.isoformat(),
        "run_id": run_id,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    manifest["decontamination"] = decontamination_counts(root)
    manifest["audit"] = audit.figures(Synthesised.of(root), held_out, test_fraction)
    manifest["promotion"] = promotion.initial(manifest["audit"])
    manifest["changes"] = changes.since_previous(root, manifest, kept)  # shown at the gate, in the report and viewer
    manifest["cost"] = release_cost(root, kept, prices_from_env())
    root.write_text(posixpath.join(vdir, CARD), card.render_card(manifest, kept, sources))
    root.write_text(posixpath.join(vdir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
    _commit(root, vdir, final)
    tables.mark_latest(root, number)
    log.info(
        "published dataset v%d: %d samples in %d shards (%d filtered)",
        number,
        kept.num_rows,
        len(names),
        rejections.num_rows,
    )
    return manifest


def _multi_table_files(root: DataRoot, files) -> set[str]:
    """Those of ``files`` with a question whose reference joins tables: both splits should hold some."""
    q = tables.read(root, "queries", ["file_id", "reference_solution"])
    joins = pc.fill_null(pc.match_substring_regex(q["reference_solution"], r"(?i)\bJOIN\b"), False)
    return set(pc.unique(q.filter(joins)["file_id"]).to_pylist()) & set(files)


class NothingToPublish(ValueError):
    """No judged row is publishable and no release holds any: nothing was written or promoted. The message
    names the stage that produced nothing and its rejections by reason."""


def _release_holding(root: DataRoot, sample_ids: set[str]) -> dict | None:
    """The manifest of the newest complete release holding one of ``sample_ids``, or None."""
    if not sample_ids:
        return None
    for number, complete in reversed(versions(root)):
        manifest = read_manifest(root, number) if complete else None
        if manifest is None:
            continue
        vdir = posixpath.join(DIRS["dataset"], f"v{number}")
        parts = [root.path(vdir, s["name"]) for s in manifest.get("shards") or []]
        held = read_table(root, DATASET, vdir, columns=["sample_id"], paths=parts).column("sample_id").to_pylist()
        if not sample_ids.isdisjoint(held):
            return manifest
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


def _by_reason(counts: Counter) -> str:
    return ", ".join(f"{code or 'unknown'}: {n}" for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def why_nothing(root: DataRoot, screened: _Screened) -> str:
    """Which stage produced nothing for the release, and why: the judged rows' filter drops, or else the
    nearest stage upstream whose input holds items but whose output none, with its rejections by reason."""
    parts = (screened.partition or "").split("+")  # a mixed release names its partitions joined by "+"
    judged = ", ".join(posixpath.join(DIRS["judged"], part) for part in parts) if screened.partition else DIRS["judged"]
    if screened.n_judged:
        return (
            f"publish_dataset dropped all {_plural(screened.n_judged, 'judged row')} of {judged}/; "
            f"by reason: {_by_reason(Counter(column_counts(screened.rejections, 'reason_code')))}"
        )
    rejected: dict[str, Counter] = {}
    for r in tables.read(root, "rejections", ["stage", "reason_code"]).to_pylist():
        rejected.setdefault(r["stage"], Counter())[r["reason_code"]] += 1
    upstream = PIPELINE[: PIPELINE.index(STAGES["publish_dataset"])]
    for stage in reversed([s for s in upstream if s.reads in ITEM_COLUMN]):
        items = _items(root, stage.reads)
        if not items:
            continue
        codes = rejected.get(stage.rejections or "")
        why = f"by reason: {_by_reason(codes)}" if codes else f"it recorded no rejection (has {stage.dag_id} run?)"
        skips = _synthesis_skips(root) if stage.dag_id == "synthesize_queries" else None
        if skips:
            why += f"; skipped by reason: {_by_reason(skips)}"
        return (
            f"{judged}/ is empty: {stage.dag_id} wrote no row to {DIRS[stage.writes]}/ from the "
            f"{_plural(len(items), stage.item)} in {DIRS[stage.reads]}/; {why}"
        )
    files = tables.read(root, "catalog_files", ["status", "reason_code"]).to_pylist()
    if files:
        return (
            f"{judged}/ is empty: ingestion accepted none of the {_plural(len(files), 'file')} in "
            f"{DIRS['catalog_files']}/; by reason: {_by_reason(Counter(f['reason_code'] for f in files))}"
        )
    return f"{judged}/ is empty and so is {DIRS['catalog_files']}/: nothing was ingested"


def _items(root: DataRoot, table: str) -> set[str]:
    """The items of ``table`` its reading stage plans over (of catalog/files, the accepted files only)."""
    column = ITEM_COLUMN[table]
    if table == "catalog_files":
        rows = tables.read(root, table, [column, "status"]).to_pylist()
        return {r[column] for r in rows if r["status"] == "accepted"}
    return set(tables.read(root, table, [column]).column(column).to_pylist())


def _synthesis_skips(root: DataRoot) -> Counter:
    """What synthesis skipped by reason (a table no template fits writes no row and no rejection)."""
    skips: Counter = Counter()
    for fingerprint in tables.partitions(root, "queries"):
        for record in tables.queries(root, fingerprint.removeprefix("params=")).records().values():
            for reasons in (record.get("skips") or {}).values():
                skips.update(reasons)
    return skips


STAGING = "staging/dataset"


def _commit(root: DataRoot, staged: str, final: str) -> None:
    """Move a finished release into ``dataset/``. On a local disk (and on object stores whose move is a
    per-file copy, where the manifest is the release's commit mark) readers see it whole or not at all."""
    root.remove(final)  # an earlier attempt's leftovers: it had no manifest, so it was never a release
    src, dst = root.path(staged), root.path(final)
    if root.is_local:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        return
    files = sorted(root.fs.find(src))
    manifest = [f for f in files if f.endswith("/" + MANIFEST)]
    for f in [f for f in files if f not in manifest] + manifest:  # the manifest last: it marks completeness
        root.fs.copy(f, dst + f[len(src) :])
    root.remove(staged)


def _source_uri(root: DataRoot, uri: str) -> str:
    return uri if ("://" in uri or uri.startswith("/")) else root.uri(uri)


def _with_readable_data(
    root: DataRoot, rows: list[dict], status: dict[str, str | None]
) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Rows whose data file can be carried into the release, and the others with the reason: a sample
    whose data is gone cannot be replayed or trained on. ``status`` remembers each file's answer."""
    kept, missing = [], []
    for row in rows:
        uri = row.get("data_uri")
        if uri and uri not in status:
            try:
                with fsspec.open(_source_uri(root, uri), "rb"):
                    status[uri] = None
            except OSError as exc:
                status[uri] = f"data file {uri} cannot be read: {type(exc).__name__}: {exc}"
        why = status.get(uri) if uri else None
        (missing.append((row, why)) if why else kept.append(row))
    return kept, missing


def _missing_rejection(row: dict, why: str, run_id: str | None, now: datetime) -> dict:
    return rejection(
        STAGE,
        row["sample_id"],
        "data_file_missing",
        why,
        file_id=row.get("file_id"),
        query_id=row.get("query_id"),
        run_id=run_id,
        created_at=now,
    )


def _carry_files(root: DataRoot, vdir: str, kept: pa.Table) -> list[dict]:
    """Copy each data file the kept rows analyse into the version folder; one entry per file, by file id."""
    catalog = {}
    if root.exists(DIRS["catalog_files"]):
        for r in tables.read(root, "catalog_files").to_pylist():
            catalog[r["file_id"]] = r
    with_data = kept.filter(pc.fill_null(pc.not_equal(kept["data_uri"], ""), False))
    # in sample_id order, so a file's first row names it as before the rows were a table
    per_file = with_data.group_by("file_id", use_threads=False).aggregate(
        [("data_uri", "first"), ("split", "first"), ("sample_id", "count")]
    )
    sources = []
    for f in per_file.to_pylist():
        fid = f["file_id"]
        rel = card.carried_path(fid, f["data_uri_first"])
        data = card.read_source_file(_source_uri(root, f["data_uri_first"]))
        root.write_bytes(posixpath.join(vdir, rel), data)
        info = catalog.get(fid, {})
        try:
            provenance = json.loads(info.get("provenance") or "{}")
        except json.JSONDecodeError:
            provenance = {}
        sources.append(
            {
                "file_id": fid,
                "path": rel,
                "name": posixpath.basename(rel),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "source": info.get("source"),
                "license": provenance.get("license") if isinstance(provenance, dict) else None,
                # a file over the row limit kept as a seeded sample of its rows (ingest.stage.row_sample)
                "row_sample": provenance.get("row_sample") if isinstance(provenance, dict) else None,
                "split": f["split_first"],
                "samples": f["sample_id_count"],
            }
        )
    return sorted(sources, key=lambda s: s["file_id"])


def _count(kept: pa.Table, column: str) -> dict[str, int]:
    return {str(k): n for k, n in sorted(column_counts(kept, column).items(), key=lambda kv: str(kv[0]))}


def _clear_strays(root: DataRoot, vdir: str, keep: set[str]) -> None:
    """Remove what a killed earlier attempt left in this (incomplete) version: extra parts, temporaries."""
    path = root.path(vdir)
    if not root.fs.exists(path):
        return
    for entry in root.fs.ls(path, detail=False):
        base = posixpath.basename(entry)
        if base not in keep and base != MANIFEST:
            root.fs.rm(entry)


def dataset_glob(root: DataRoot | str, version: int | None = None) -> str:
    """A glob of the Parquet shards of a complete release (for duckdb / polars / datasets)."""
    root = DataRoot.of(root)
    m = read_manifest(root, version)
    if m is None:
        raise FileNotFoundError("no complete dataset release under the data root")
    return root.uri(DIRS["dataset"], f"v{m['version']}", "part-*.parquet")


def decontamination_counts(root: DataRoot) -> dict:
    """What decontamination kept out of the data root: benchmark files at ingest, questions at synthesis."""
    out: dict = {"files": {}, "questions": 0}
    if root.exists(DIRS["catalog_files"]):
        for r in tables.read(root, "catalog_files", ["rel_path", "reason_code", "reason"]).to_pylist():
            if r["reason_code"] == "benchmark_overlap":
                out["files"][r["rel_path"]] = r["reason"]
    if root.exists(DIRS["rejections"]):
        codes = tables.read(root, "rejections", ["reason_code"]).column("reason_code").to_pylist()
        out["questions"] = sum(1 for code in codes if code == "benchmark_question_overlap")
    out["n_files"] = len(out["files"])
    return out
