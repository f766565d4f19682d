"""Publish the training dataset: ``judged`` -> rule filters -> ``dataset/v<N>/part-XXXXX.parquet`` + manifest.

The release is a pure function of the judged rows of one judging configuration (``judged/params=<fp>``):
filter (recording every drop in ``rejections/filter``), de-duplicate by ``sample_id``, sort by ``sample_id``,
cut into shards of ``shard_rows``.  Its content hash covers the sample ids (and the schema version); when the
newest complete release already has that hash nothing is written.  Otherwise the next ``v<N>`` is
filled shard by shard (each write atomic) and ``manifest.json`` is written last: a release without a
manifest is incomplete, readers must ignore it, and the next run reuses and overwrites that same
``v<N>`` (deleting any stray shard or temporary file), so a killed publish never leaves a partial or
duplicated shard behind.  ``dataset/LATEST`` names the newest complete version.
"""

from __future__ import annotations

import hashlib
import json
import os
import logging
import posixpath
import re
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone

import fsspec

from datamind.assets import DIRS
from datamind.filters.rules import apply_filters
from datamind.filters.tokenizer import tokenizer_name
from datamind.judge.stage import committed_query_ids
from datamind.publish import card
from datamind.publish.audit import audit_rows
from datamind.publish.params import PublishParams
from datamind.stage_params import from_params
from datamind.schemas import CATALOG_FILES, DATASET, QUERIES, REJECTIONS, rejection
from datamind.shards import read_rows, table_to_parquet_bytes
from datamind.storage import DataRoot
from datamind.stages import STAGES

log = logging.getLogger(__name__)

STAGE = STAGES["publish_dataset"].rejections
MANIFEST = "manifest.json"
CARD = "README.md"
_VDIR = re.compile(r"^v(\d+)$")
_PARTITION = re.compile(r"^params=[0-9a-f]+$")


def part_name(i: int) -> str:
    return f"part-{i:05d}.parquet"


def content_version(sample_ids: list[str], test_fraction: float = 0.1) -> str:
    h = hashlib.sha256(f"dataset-schema={DATASET.version}\ntest_fraction={test_fraction}\n".encode())
    for sid in sorted(sample_ids):
        h.update(sid.encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


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
        return json.loads(root.read_text(DIRS["dataset"], f"v{version}", MANIFEST))
    except FileNotFoundError:
        return None


def judged_partitions(root: DataRoot) -> list[str]:
    """The ``params=<fp>`` partitions of ``judged`` (one per judging configuration)."""
    base = root.path(DIRS["judged"])
    if not root.fs.exists(base):
        return []
    names = (posixpath.basename(e.rstrip("/")) for e in root.fs.ls(base, detail=False))
    return sorted(n for n in names if _PARTITION.match(n))


def _source(root: DataRoot, partition: str | None) -> tuple[str, str | None]:
    parts = judged_partitions(root)
    if partition is not None:
        if partition not in parts:
            raise ValueError(f"judged partition {partition!r} not found; available: {parts}")
        return posixpath.join(DIRS["judged"], partition), partition
    if len(parts) > 1:
        raise ValueError(f"several judged partitions {parts} (different judging settings): pass judged_partition=")
    if parts:
        return posixpath.join(DIRS["judged"], parts[0]), parts[0]
    return DIRS["judged"], None


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


def publish_dataset(
    root: DataRoot | str,
    run_id: str | None,
    params: PublishParams | dict | None = None,
    **overrides,
) -> dict:
    """Filter the judged rows and publish them as a new dataset version; returns its manifest.

    ``params`` (or keyword overrides of its fields, e.g. ``shard_rows=100``): ``judged_partition`` picks one
    judging configuration (``params=<fp>``); it may be omitted when there is only one.
    """
    p = params if isinstance(params, PublishParams) else from_params(PublishParams, params)
    p = replace(p, **overrides) if overrides else p
    shard_rows, judged_partition, test_fraction = p.shard_rows, p.judged_partition, p.test_fraction
    filter_config = p.filter_config()
    root = DataRoot.of(root)
    t0 = time.perf_counter()
    now = datetime.now(timezone.utc)
    src, partition = _source(root, judged_partition)
    judged = read_rows(root, DATASET, src)
    committed = committed_query_ids(root, src)
    if committed is not None:  # rows of a judging shard killed before it committed are not part of any release
        judged = [r for r in judged if r["query_id"] in committed]
    judge_params = json.loads(root.read_text(src, "params.json")) if root.exists(src, "params.json") else None
    rejections_file = posixpath.join(DIRS["rejections"], STAGE, f"part-{partition or 'judged'}.parquet")
    unique: dict[str, dict] = {}
    for row in judged:
        unique.setdefault(row["sample_id"], row)  # reruns of a judge shard rewrite identical ids
    kept, dropped = apply_filters(unique.values(), filter_config)
    kept, missing = _with_readable_data(root, kept)
    rejections = sorted(
        [_filter_rejection(r, f, run_id, now) for r, f in dropped]
        + [_missing_rejection(r, why, run_id, now) for r, why in missing],
        key=lambda r: r["item_id"],
    )
    if rejections:  # a pure function of the judged rows: rewritten whole on every publish
        root.write_bytes(rejections_file, table_to_parquet_bytes(REJECTIONS.to_table(rejections)))
    elif root.exists(rejections_file):
        root.remove(rejections_file)
    kept.sort(key=lambda r: r["sample_id"])
    for r in kept:  # the release's own view of each row: its split, and its data file inside the folder
        r["split"] = card.split_of(r["file_id"], test_fraction)
    digest = content_version([r["sample_id"] for r in kept], test_fraction)

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
    parts = [kept[i : i + shard_rows] for i in range(0, len(kept), shard_rows)]
    names = [part_name(i) for i in range(len(parts))]
    _clear_strays(root, vdir, keep=set(names) | {card.FILES_DIR, CARD})
    shard_info = []
    for name, rows in zip(names, parts):
        data = table_to_parquet_bytes(DATASET.to_table(rows))
        root.write_bytes(posixpath.join(vdir, name), data)
        shard_info.append({"name": name, "rows": len(rows), "bytes": len(data)})
    by_cat: dict[str, int] = {}
    for r in kept:
        by_cat[r["category"]] = by_cat.get(r["category"], 0) + 1
    by_reason: dict[str, int] = {}
    for r in rejections:
        by_reason[r["reason_code"]] = by_reason.get(r["reason_code"], 0) + 1  # filters and missing data
    manifest = {
        "version": number,
        "version_id": f"v{number}",  # the one name of this release: folder, exports, Asset events, summaries
        "content_hash": digest,
        "table": DATASET.name,
        "schema_version": DATASET.version,
        "n_samples": len(kept),
        "n_judged": len(unique),
        "n_filtered": len(rejections),
        "filtered_by_reason": dict(sorted(by_reason.items())),
        "by_category": dict(sorted(by_cat.items())),
        "by_strategy": _count(kept, "selection_strategy"),
        "by_split": _count(kept, "split"),
        "by_answer_check": _count(kept, "answer_check"),
        "test_fraction": test_fraction,
        "files": {s["file_id"]: {"path": s["path"], "sha256": s["sha256"], "bytes": s["bytes"]} for s in sources},
        "judged_partition": partition,
        "judge_params": judge_params,
        "shards": shard_info,
        "shard_rows": shard_rows,
        "compression": "zstd",
        "answer_tokenizer": tokenizer_name(),
        "created_at": now.isoformat(),
        "run_id": run_id,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    manifest["decontamination"] = decontamination_counts(root)
    queries = read_rows(root, QUERIES, DIRS["queries"], columns=["category"]) if root.exists(DIRS["queries"]) else []
    manifest["audit"] = audit_rows(kept, dict(Counter(q["category"] for q in queries)))
    root.write_text(posixpath.join(vdir, CARD), card.render_card(manifest, kept, sources))
    root.write_text(posixpath.join(vdir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
    _commit(root, vdir, final)
    root.write_text(posixpath.join(DIRS["dataset"], "LATEST"), f"v{number}\n")
    log.info(
        "published dataset v%d: %d samples in %d shards (%d filtered)", number, len(kept), len(parts), len(rejections)
    )
    return manifest


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


def _with_readable_data(root: DataRoot, rows: list[dict]) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Rows whose data file can be carried into the release, and the others with the reason: a sample
    whose data is gone cannot be replayed or trained on."""
    status: dict[str, str | None] = {}
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


def _carry_files(root: DataRoot, vdir: str, rows: list[dict]) -> list[dict]:
    """Copy each data file the rows analyse into the version folder and point ``data_uri`` at the copy."""
    catalog = {}
    if root.exists(DIRS["catalog_files"]):
        for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"]):
            catalog[r["file_id"]] = r
    sources: dict[str, dict] = {}
    for row in rows:
        fid, uri = row["file_id"], row.get("data_uri")
        if not uri:
            continue
        if fid not in sources:
            rel = card.carried_path(fid, uri)
            data = card.read_source_file(_source_uri(root, uri))
            root.write_bytes(posixpath.join(vdir, rel), data)
            info = catalog.get(fid, {})
            try:
                provenance = json.loads(info.get("provenance") or "{}")
            except json.JSONDecodeError:
                provenance = {}
            sources[fid] = {
                "file_id": fid,
                "path": rel,
                "name": posixpath.basename(rel),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "source": info.get("source"),
                "license": provenance.get("license") if isinstance(provenance, dict) else None,
                "split": row["split"],
                "samples": 0,
            }
        sources[fid]["samples"] += 1
        row["data_uri"] = sources[fid]["path"]
    return sorted(sources.values(), key=lambda s: s["file_id"])


def _count(rows: list[dict], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[str(r.get(key))] = out.get(str(r.get(key)), 0) + 1
    return dict(sorted(out.items()))


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
        for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"], columns=["rel_path", "reason_code", "reason"]):
            if r["reason_code"] == "benchmark_overlap":
                out["files"][r["rel_path"]] = r["reason"]
    if root.exists(DIRS["rejections"]):
        codes = read_rows(root, REJECTIONS, DIRS["rejections"], columns=["reason_code"])
        out["questions"] = sum(1 for r in codes if r["reason_code"] == "benchmark_question_overlap")
    out["n_files"] = len(out["files"])
    return out
