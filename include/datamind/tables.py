"""The table layer, just above the shard store: how a table's shards commit, which items are done, what a
release is. Every stage reads the table below it through this module, never through a sibling stage's module.

**Commits.** A stage writes a shard's files (atomically, named after the shard), then one marker,
``<partition>/_commits/<shard>.json``, naming the items the shard covers and the files it wrote. An item is
done when a committed shard names it; files of a shard killed before its marker are not part of the table, and
the rerun of the same shard rewrites them under the same names. The marker is the only record of "done":
planners, reruns and readers all ask ``Partition.done()`` or ``Partition.files()``.

**Releases.** ``dataset/v<N>/`` is complete when its ``manifest.json`` is there; ``dataset/LATEST`` names the
newest; a release may be trained on when its promotion says so (``trainable``).

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from datamind.assets import DIRS
from datamind.schemas import DATASET, REJECTIONS, TRAJECTORIES
from datamind.shards import read_table, shard_paths
from datamind.stages import STAGES
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
