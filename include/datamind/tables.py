"""The table layer, just above the shard store: how a table's shards commit, which items are done, what a
release is. Every stage reads the table below it through this module, never through a sibling stage's module.

**Commits.** A stage writes a shard's files (atomically, named after the shard), then one marker,
``<partition>/_commits/<shard>.json``, naming the items the shard covers and the files it wrote. An item is
done when a committed shard names it; files of a shard killed before its marker are not part of the table, and
the rerun of the same shard rewrites them under the same names. The marker is the only record of "done":
planners, reruns and readers all ask ``Partition.done()`` or ``Partition.files()``.

**Releases.** ``dataset/v<N>/`` is complete when its ``manifest.json`` is there; ``dataset/LATEST`` names the
newest; a release may be trained on when its promotion says so (``trainable``).

**Reading.** ``read(root, name, ...)`` is how any stage reads a table by name: the rows that count (of a
partition with markers, its committed shards'; of judging's, the rows of its done items) and, given a
planner's hint (``key_paths``), the hinted files first and the rest of the table only for what they lacked.

**Migration.** Partitions written before commit markers are read here and nowhere else (``_LEGACY``): a
judging partition's rows, synthesis' ``part-*.summary.json`` files, every trajectory and rollout rejection file.
The first commit into such a partition records what it held (``_commits/legacy.json``) and marks the partition
(``_commits/PROTOCOL``); from then on only markers count.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from datamind.assets import DIRS
from datamind.schemas import ALL, DATASET, REJECTIONS, TRAJECTORIES
from datamind.shards import read_table, shard_paths
from datamind.stages import STAGES, contract
from datamind.storage import DataRoot
from datamind.vocabulary import TRANSIENT_ERRORS

COMMITS = "_commits"
PROTOCOL = "PROTOCOL"
LEGACY = "legacy"


# -- commits ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Partition:
    """A folder of a table whose shards commit with a marker. ``kind`` names the table's layout before
    markers (a key of ``_LEGACY``), so an old partition keeps its done items."""

    root: DataRoot
    dir: str
    kind: str

    @property
    def commits_dir(self) -> str:
        return posixpath.join(self.dir, COMMITS)

    def marked(self) -> bool:
        return self.root.exists(self.commits_dir, PROTOCOL)

    def records(self) -> dict[str, dict]:
        """shard id -> its commit record ``{"items": [...], "files": {name: [paths]}, ...}``."""
        if not self.marked():
            return _LEGACY[self.kind](self)
        out = {}
        for path in self.root.glob(self.commits_dir, "*.json"):
            shard = posixpath.basename(path)[: -len(".json")]
            out[shard] = _normal(json.loads(self.root.read_text(self.root.rel(path))))
        return out

    def record(self, shard_id: str) -> dict | None:
        """The commit record of one shard (None: not committed), read without listing the others."""
        if not self.marked():
            return _LEGACY[self.kind](self).get(shard_id)
        rel = posixpath.join(self.commits_dir, f"{shard_id}.json")
        return _normal(json.loads(self.root.read_text(rel))) if self.root.exists(rel) else None

    def done(self) -> set[str]:
        return {item for rec in self.records().values() for item in rec["items"]}

    def files(self, name: str, records: dict[str, dict] | None = None) -> list[str]:
        """The committed files of output ``name`` (filesystem paths, as ``shards.shard_paths`` gives them);
        ``records``: this partition's records when the caller read them already."""
        records = self.records() if records is None else records
        return sorted({self._full(p) for rec in records.values() for p in rec["files"].get(name, ()) if p})

    def _full(self, path: str) -> str:
        # records name files relative to the data root (a moved root keeps its records); judging's first
        # markers held filesystem paths
        return path if path.startswith(self.root.root.rstrip("/") + "/") else self.root.path(path)

    def _rel(self, path: str) -> str:
        return self.root.rel(self._full(path))

    def begin(self) -> Partition:
        """Before a shard writes its files (and when a planner looks): a partition from before markers is
        migrated (what it held becomes committed records) and marked, so from then on the files of a shard
        killed before its commit never count as done. Idempotent; planners ``migrate``, so an existing partition
        is migrated once, before its shards run side by side."""
        if not self.marked():
            for shard, rec in _LEGACY[self.kind](self).items():
                held = {n: sorted(self._rel(p) for p in paths) for n, paths in rec["files"].items()}
                self._write_record(shard, {**rec, "files": held})
            self.root.write_text(
                posixpath.join(self.commits_dir, PROTOCOL), "a shard is done when _commits/<shard>.json exists\n"
            )
        return self

    def migrate(self) -> Partition:
        """``begin`` for a partition that exists (what a planner calls: it creates no empty partition)."""
        return self.begin() if self.root.exists(self.dir) else self

    def commit(self, shard_id: str, items: Iterable[str], files: dict[str, str | None], /, **fields) -> dict:
        """Mark the shard done, after its files are written. ``files``: output name -> path (None: no rows)."""
        if not shard_id.isalnum():
            raise ValueError(f"shard id must be alphanumeric (it names a file), got {shard_id!r}")
        self.begin()
        record = {**fields, "items": sorted(items), "files": {k: [self._rel(v)] for k, v in files.items() if v}}
        self._write_record(shard_id, record)
        return record

    def _write_record(self, shard_id: str, record: dict) -> None:
        self.root.write_text(
            posixpath.join(self.commits_dir, f"{shard_id}.json"), json.dumps(record, sort_keys=True, default=str)
        )


def _normal(record: dict) -> dict:
    """A record as this module writes it; judging's first markers named their items ``query_ids`` and their
    files by output name at the top level."""
    if "items" in record:
        return record
    files = {k: [record[k]] for k in ("judged", "reflected", "rejections") if record.get(k)}
    return {**record, "items": record.get("query_ids", []), "files": files}


def _legacy_judged(part: Partition) -> dict[str, dict]:
    # before markers, every written row counted: the judged queries and the rejected ones
    def ids(schema, rel: str) -> set[str]:
        return {q for q in read_table(part.root, schema, rel, columns=["query_id"]).column("query_id").to_pylist() if q}

    name = posixpath.basename(part.dir)
    items = ids(DATASET, part.dir) | ids(REJECTIONS, posixpath.join(judge_rejections_dir(), name))
    return {LEGACY: {"items": sorted(items), "files": {}}} if items else {}


def _legacy_queries(part: Partition) -> dict[str, dict]:
    # synthesis wrote a summary per shard, last, listing its tables
    out = {}
    if part.root.exists(part.dir):
        for path in part.root.glob(part.dir, "part-*.summary.json"):  # (run-*.summary.json: a run's report)
            summary = json.loads(part.root.read_text(part.root.rel(path)))
            shard = summary.get("shard_id") or posixpath.basename(path)[len("part-") : -len(".summary.json")]
            outputs = summary.get("outputs") or {}
            files = {k: [v] for k, v in outputs.items() if v}
            out[shard] = {**summary, "items": summary.get("table_ids", []), "files": files}
    return out


def _legacy_trajectories(part: Partition) -> dict[str, dict]:
    # sampling wrote its two files with no marker: every round-0 file and every rollout rejection counted
    files = {
        "trajectories": [
            p for p in shard_paths(part.root, part.dir) if not part.root.rel(p).startswith(f"{part.dir}/{REFLECT}/")
        ],
        "rejections": shard_paths(part.root, rollout_rejections_dir()),
    }
    return {LEGACY: {"items": [], "files": files}} if any(files.values()) else {}


_LEGACY: dict[str, Callable[[Partition], dict[str, dict]]] = {
    "judged": _legacy_judged,
    "queries": _legacy_queries,
    "trajectories": _legacy_trajectories,
}


# -- the tables ---------------------------------------------------------------------------------------------
REFLECT = "reflect"
_PARTITION = re.compile(r"^params=[0-9a-f]+$")


def queries(root: DataRoot, fingerprint: str) -> Partition:
    """Synthesis' output for one parameter set; items are table ids."""
    return Partition(root, posixpath.join(DIRS["queries"], f"params={fingerprint}"), "queries")


def synthesis_rejections_dir(fingerprint: str) -> str:
    return posixpath.join(DIRS["rejections"], STAGES["synthesize_queries"].rejections, f"params={fingerprint}")


def trajectories(root: DataRoot) -> Partition:
    """Sampling's round-0 trajectories and rollout rejections; items are query ids."""
    return Partition(root, DIRS["trajectories"], "trajectories")


def rollout_rejections_dir() -> str:
    return posixpath.join(DIRS["rejections"], STAGES["sample_trajectories"].rejections)


def judged(root: DataRoot, partition: str) -> Partition:
    """Judging's output for one parameter set (``params=<fp>``); items are query ids."""
    return Partition(root, posixpath.join(DIRS["judged"], partition), "judged")


def judge_rejections_dir() -> str:
    return posixpath.join(DIRS["rejections"], STAGES["judge_trajectories"].rejections)


def reflected_dir(partition: str) -> str:
    return posixpath.join(DIRS["trajectories"], REFLECT, partition)


def partitions(root: DataRoot, table: str) -> list[str]:
    """The ``params=<fp>`` partitions of ``table`` (``queries``, ``judged``: one per parameter set)."""
    base = root.path(DIRS[table])
    if not root.fs.exists(base):
        return []
    names = (posixpath.basename(e.rstrip("/")) for e in root.fs.ls(base, detail=False))
    return sorted(n for n in names if _PARTITION.match(n))


def judged_partitions(root: DataRoot) -> list[str]:
    return partitions(root, "judged")


@dataclass
class SamplingState:
    """What the committed trajectories and rollout rejections say, read in one pass."""

    done: set[str] = field(default_factory=set)  # queries whose round 0 is final (or that were rejected)
    # query -> {sample_index: attempts so far} for trajectories that failed transiently and may be redone
    resample: dict[str, dict[int, int]] = field(default_factory=dict)
    # query -> the trajectory shards holding its round-0 rows: a judging shard reads only these
    files: dict[str, set[str]] = field(default_factory=dict)


def transient(status: str | None, error: str | None) -> bool:
    """A trajectory that failed for the platform's sake (endpoint, rate limits, sandbox), not the agent's."""
    return status == "error" and (error or "").split(":", 1)[0].strip() in TRANSIENT_ERRORS


def sampling_state(root: DataRoot, attempts_allowed: Callable[[str | None], int]) -> SamplingState:
    """Round-0 outcome per query. A trajectory is the latest row of its (query, sample index): a re-sampled
    one supersedes the attempt before it. One whose latest attempt failed transiently and has attempts left
    (``attempts_allowed(row's sampling_params)``) keeps its query out of ``done``, listed in ``resample``."""
    part = trajectories(root)
    records = part.records()  # one listing of the commit records for both outputs
    cols = ["query_id", "sample_index", "reflection_round", "status", "error", "created_at", "sampling_params"]
    # per (query, sample index): whether its latest attempt failed transiently, when, and with which
    # parameters; the texts a row carries are not kept (at 300,000 queries they were most of a planner's RSS),
    # and each distinct parameter text is held once
    latest: dict[tuple[str, int], tuple[bool, datetime, str | None]] = {}
    params: dict[str | None, str | None] = {}
    attempts: Counter = Counter()
    state = SamplingState()
    for path in part.files("trajectories", records):
        t = read_table(root, TRAJECTORIES, DIRS["trajectories"], columns=cols, paths=[path])
        for q, i, r, status, error, ts, sp in zip(*(t.column(c).to_pylist() for c in cols), strict=True):
            if r != 0:
                continue
            key = (q, int(i))
            attempts[key] += 1
            state.files.setdefault(q, set()).add(path)
            if key not in latest or ts > latest[key][1]:
                latest[key] = (transient(status, error), ts, params.setdefault(sp, sp))
    caps: dict[str | None, int] = {}
    for (q, i), (failed_transiently, _, sp) in latest.items():
        if sp not in caps:
            caps[sp] = attempts_allowed(sp)
        if failed_transiently and attempts[(q, i)] < caps[sp]:
            state.resample.setdefault(q, {})[i] = attempts[(q, i)]
        else:
            state.done.add(q)
    state.done -= set(state.resample)
    rejected = read_table(
        root, REJECTIONS, rollout_rejections_dir(), columns=["query_id"], paths=part.files("rejections", records)
    )
    state.done.update(q for q in rejected.column("query_id").to_pylist() if q)
    return state


# -- reading a table by name -------------------------------------------------------------------------------
def files(root: DataRoot, table: str, partition: str | None = None) -> list[str]:
    """The shard files of ``table`` (a key of ``assets.DIRS``) whose rows count, ``partition`` (``params=<fp>``)
    alone when given. A partition with commit markers counts its committed shards' files (judging's: every
    file, ``read`` keeping the rows of done items); one from before markers, and a table without them,
    every file; sampling's round 0 excludes the reflection rounds under it."""
    if table == "trajectories":
        return trajectories(root).files("trajectories")
    base = DIRS[table]
    if table not in ("queries", "judged"):
        return shard_paths(root, base if partition is None else posixpath.join(base, partition))
    names = [partition] if partition is not None else partitions(root, table)
    # rows written beside the partitions (no parameter set: nothing marks them) count as they are
    out = [] if partition is not None else [p for p in shard_paths(root, base) if not _in_partition(root, base, p)]
    for name in names:
        part = queries(root, name.removeprefix("params=")) if table == "queries" else judged(root, name)
        out += part.files("queries") if table == "queries" and part.marked() else shard_paths(root, part.dir)
    return sorted(out)


def _in_partition(root: DataRoot, base: str, path: str) -> bool:
    first = root.rel(path)[len(base) + 1 :].split("/", 1)[0]
    return _PARTITION.match(first) is not None


def _done_items(root: DataRoot, table: str, partition: str | None) -> set[str] | None:
    """Judging's items that count (query ids), or None when every row of ``files`` counts: a judging shard
    writes the rows of its queries and then commits them, and migrated partitions name items, not files."""
    if table != "judged":
        return None
    names = [partition] if partition is not None else partitions(root, table)
    marked = [judged(root, n) for n in names if judged(root, n).marked()]
    if not marked:
        return None
    done = {q for part in marked for q in part.done()}
    # an unmarked partition beside marked ones: every row it holds counts
    for n in names:
        part = judged(root, n)
        if not part.marked():
            done |= {q for q in read_table(root, DATASET, part.dir, columns=["query_id"]).column(0).to_pylist() if q}
    return done


def _columns(columns: list[str] | None, *needed: str | None) -> list[str] | None:
    return columns if columns is None else [*columns, *(c for c in dict.fromkeys(needed) if c and c not in columns)]


def _counting(t: pa.Table, items: set[str] | None, columns: list[str] | None) -> pa.Table:
    if items is not None:
        t = t.filter(pc.fill_null(pc.is_in(t["query_id"], value_set=pa.array(sorted(items), pa.string())), False))
    return t.select(columns) if columns is not None else t


def read(
    root: DataRoot,
    table: str,
    columns: list[str] | None = None,
    *,
    where: tuple[str, Iterable[str]] | None = None,
    hint: Iterable[str] | None = None,
    partition: str | None = None,
) -> pa.Table:
    """The rows of ``table`` that count (``files``), as one table with its contract's schema.

    ``where=(column, values)`` keeps the rows whose ``column`` is one of ``values``; with ``hint`` (the files a
    planner found them in, ``key_paths``) those files are read first and the rest of the table only for the
    values they lacked, so a stale hint costs time, never rows."""
    schema = ALL[contract(table)]
    if where is not None:
        where = (where[0], {v for v in where[1] if v is not None})
        if not where[1]:
            empty = schema.schema.empty_table()
            return empty.select(columns) if columns else empty
    counted, items = files(root, table, partition), _done_items(root, table, partition)
    cols = _columns(columns, where[0] if where else None, "query_id" if items is not None else None)
    rel = DIRS[table]
    if where is not None and hint is not None:
        first = sorted(set(hint) & set(counted))
        t = read_table(root, schema, rel, cols, where, paths=first)
        rest = where[1] - set(t.column(where[0]).to_pylist())
        if rest:
            more = read_table(root, schema, rel, cols, (where[0], rest), paths=[p for p in counted if p not in first])
            t = pa.concat_tables([t, more], promote_options="default")
    else:
        t = read_table(root, schema, rel, cols, where, paths=counted)
    return _counting(t, items, columns)


def each(
    root: DataRoot, table: str, columns: list[str] | None = None, *, partition: str | None = None
) -> Iterator[tuple[str, pa.Table]]:
    """(file, its rows that count) for each of ``table``'s counted files, one at a time: for a reader that
    bounds its memory or records where each row is."""
    schema, items = ALL[contract(table)], _done_items(root, table, partition)
    cols = _columns(columns, "query_id" if items is not None else None)
    for path in files(root, table, partition):
        yield path, _counting(read_table(root, schema, DIRS[table], cols, paths=[path]), items, columns)


def key_paths(root: DataRoot, table: str, key: str) -> dict[str, set[str]]:
    """Which of ``table``'s counted files hold each value of ``key`` (one pass, one column): the hint a planner
    hands its shards so each reads its own rows' files only."""
    out: dict[str, set[str]] = {}
    for path, t in each(root, table, [key]):
        for value in t.column(key).to_pylist():
            out.setdefault(value, set()).add(path)
    return out


# -- releases -----------------------------------------------------------------------------------------------
MANIFEST = "manifest.json"
CARD = "README.md"
LATEST = "LATEST"
PROMOTED, AWAITING, REJECTED = "promoted", "awaiting_approval", "rejected"
_VDIR = re.compile(r"^v(\d+)$")


def release_dir(version: int) -> str:
    return posixpath.join(DIRS["dataset"], f"v{version}")


def versions(root: DataRoot) -> list[tuple[int, bool]]:
    """(N, complete) for every ``dataset/v<N>`` directory, ascending."""
    base = root.path(DIRS["dataset"])
    if not root.fs.exists(base):
        return []
    out = []
    for entry in root.fs.ls(base, detail=False):
        m = _VDIR.match(posixpath.basename(entry.rstrip("/")))
        if m:
            out.append((int(m.group(1)), root.exists(DIRS["dataset"], m.group(0), MANIFEST)))
    return sorted(out)


def read_manifest(root: DataRoot | str, version: int | None = None) -> dict | None:
    """The manifest of ``v<version>``, or of the newest complete release."""
    root = DataRoot.of(root)
    if version is None:
        complete = [n for n, ok in versions(root) if ok]
        if not complete:
            return None
        version = complete[-1]
    try:
        return json.loads(root.read_text(release_dir(version), MANIFEST))
    except FileNotFoundError:
        return None


def release_rows(root: DataRoot, folder: str, columns: list[str] | None = None) -> pa.Table:
    """The rows of the release in ``folder`` (``dataset/v<N>``, or an export's copy of one): the shards its
    manifest lists, or every shard of a folder without a manifest."""
    try:
        manifest = json.loads(root.read_text(folder, MANIFEST))
    except FileNotFoundError:
        manifest = None
    if manifest is None or "shards" not in manifest:
        return read_table(root, DATASET, folder, columns)
    return read_table(root, DATASET, folder, columns, paths=[root.path(folder, s["name"]) for s in manifest["shards"]])


def trainable(manifest: dict) -> bool:
    """Releases published before promotion existed carry none: they were trained on as they were."""
    return (manifest.get("promotion") or {"status": PROMOTED})["status"] == PROMOTED


def trainable_manifest(root: DataRoot | str) -> dict | None:
    """The newest complete release that may be trained on (promoted by its audit or by a person)."""
    root = DataRoot.of(root)
    for number, complete in reversed(versions(root)):
        manifest = read_manifest(root, number) if complete else None
        if manifest is not None and trainable(manifest):
            return manifest
    return None


def mark_latest(root: DataRoot, version: int) -> None:
    root.write_text(posixpath.join(DIRS["dataset"], LATEST), f"v{version}\n")
