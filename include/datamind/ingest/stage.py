"""Plan and run ingestion shards: every listed file ends up exactly once in ``catalog/files``.

``plan_ingest`` is cheap (streams each file once to hash it) and returns small JSON-serialisable shard
specs; ``ingest_shard`` does the real work for one spec and writes one ``catalog/files`` shard whose
name is derived from the file ids it holds, so a retried task rewrites the same file.

Ids: ``file_id = stable_id(source_name, rel_path, sha256)``. A file already in the catalog under that
id is not planned again (a rerun over the same files is a no-op); a changed file gets a new id.
Duplicates: the first file (in rel_path order) with given bytes is judged normally, later ones in the
same batch, and files whose bytes match a file already *accepted* in the catalog, are rejected as
``duplicate_content`` naming the original.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
import posixpath
import random
import re
import stat
import tempfile
from collections import Counter
from typing import Any

import pyarrow.compute as pc

from datamind.assets import DIRS
from datamind.decontamination import BenchmarkIndex, load_index
from datamind.formats import LoadResult, sniff
from datamind.formats.parse_worker import IsolatedParser
from datamind.ids import stable_id
from datamind.ingest.rules import ACCEPTED, RULES, Verdict, check_file, check_tables
from datamind.ingest.sources import SourceFile, SourceReadError, precheck_message
from datamind.schemas import CATALOG_FILES
from datamind.settings import Limits
from datamind.shards import chunk, read_table, shard_name, write_shard
from datamind.storage import DataRoot

_EXT = {"csv": ".csv", "xlsx": ".xlsx", "sqlite": ".sqlite"}
CATALOG_FORMATS = ("csv", "xlsx", "sqlite")  # the catalog's vocabulary; anything else is "unknown"


def catalog_format(fmt: str) -> str:
    return fmt if fmt in CATALOG_FORMATS else "unknown"


def _catalog_index(root: DataRoot) -> tuple[set[str], dict[str, str]]:
    """(all file ids, sha256 -> file_id of accepted files) from catalog/files."""
    t = read_table(
        root, CATALOG_FILES, DIRS["catalog_files"], columns=["file_id", "status", "content_sha256", "rel_path"]
    )
    ids = set(t.column("file_id").to_pylist())
    accepted = t.filter(pc.equal(t.column("status"), ACCEPTED))
    accepted = accepted.sort_by([("rel_path", "ascending"), ("file_id", "ascending")])
    by_sha: dict[str, str] = {}
    for sha, fid in zip(
        accepted.column("content_sha256").to_pylist(), accepted.column("file_id").to_pylist(), strict=True
    ):
        by_sha.setdefault(sha, fid)
    return ids, by_sha


def plan_ingest(
    root: DataRoot, files: list[SourceFile], source_name: str, shard_size: int, max_shards: int | None = None
) -> list[dict[str, Any]]:
    """New files of ``files`` as shard specs (at most ``max_shards``): {"shard_id", "source", "files": [...]}."""
    known_ids, accepted_sha = _catalog_index(root)
    seen_sha: dict[str, str] = {}
    entries = []
    for f in sorted(files, key=lambda x: x.rel_path):
        precheck = f.precheck
        try:
            sha = f.sha256()
        except SourceReadError as exc:
            # A member whose stream outgrows its declared size: refuse it from now on, without re-reading.
            precheck = exc.code
            f = SourceFile(f.rel_path, f.source_uri, f.size, f.read_cap, precheck, f.provenance)
            sha = f.sha256()
        except OSError as exc:
            f = SourceFile(
                f.rel_path,
                f.source_uri,
                f.size,
                f.read_cap,
                "unloadable",
                {**f.provenance, "read_error": str(exc)[:300]},
            )
            sha = f.sha256()
        file_id = stable_id(source_name, f.rel_path, sha)
        if file_id in known_ids:
            continue
        duplicate_of = None
        if not f.precheck:
            duplicate_of = accepted_sha.get(sha) or seen_sha.get(sha)
            seen_sha.setdefault(sha, file_id)
        known_ids.add(file_id)
        entries.append({**f.to_spec(), "file_id": file_id, "sha256": sha, "duplicate_of": duplicate_of})
    specs = []
    for part in chunk(entries, shard_size, max_shards):
        ids = [e["file_id"] for e in part]
        specs.append({"shard_id": stable_id(source_name, sorted(ids)), "source": source_name, "files": part})
    return specs


def staged_filename(rel_path: str, fmt: str) -> str:
    """The file's own name, made safe, with the extension of its real format when the name lies."""
    name = re.sub(r"[^\w.\- ()=+,]", "_", posixpath.basename(rel_path)).strip() or "file"
    ext = _EXT.get(fmt)
    if ext and sniff.declared_format(name) not in (fmt, "gzip" if fmt == "csv" else fmt):
        stem = name.rsplit(".", 1)[0] if "." in name else name
        name = stem + ext
    return name


def _verdict_rows(result: LoadResult, verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [
        {
            "table_name": t.name,
            "status": v.status,
            "reason_code": v.reason_code,
            "reason": v.reason,
            "n_rows": int(t.n_rows),
            "n_cols": int(t.n_cols),
            "read_options": json.dumps(t.read_options, sort_keys=True, ensure_ascii=False),
        }
        for t, v in zip(result.tables, verdicts, strict=True)
    ]


def ingest_file(
    root: DataRoot,
    entry: dict[str, Any],
    source: str,
    limits: Limits,
    run_id: str | None,
    parser: IsolatedParser,
    benchmarks: BenchmarkIndex | None = None,
) -> dict[str, Any]:
    """Judge one planned file and return its catalog/files row (staging its bytes when accepted).

    The file is parsed by ``parser``'s child process, so a file that crashes or exhausts the reader is
    rejected as ``parse_limit`` and the rest of the shard goes on."""
    f = SourceFile.from_spec(entry)
    row: dict[str, Any] = {
        "file_id": entry["file_id"],
        "source": source,
        "source_uri": f.source_uri,
        "rel_path": f.rel_path,
        "format": "unknown",
        "declared_format": sniff.declared_format(f.filename),
        "content_sha256": entry["sha256"],
        "size_bytes": int(f.size),
        "encoding": None,
        "n_tables": 0,
        "n_rows": 0,
        "n_cols": 0,
        "staged_uri": None,
        "table_verdicts": [],
        "ingested_at": dt.datetime.now(dt.UTC),
        "run_id": run_id,
    }
    provenance = {**f.provenance, "original_filename": f.filename}

    def reject(code: str, reason: str) -> dict[str, Any]:
        row.update(
            status="rejected", reason_code=code, reason=reason, provenance=json.dumps(provenance, sort_keys=True)
        )
        return row

    if f.precheck:
        return reject(
            f.precheck if f.precheck in RULES else "unloadable", provenance.get("read_error") or precheck_message(f)
        )
    try:
        data = f.read_bytes()  # the one read: what is hashed, parsed and staged below are these bytes
    except SourceReadError as exc:
        return reject(exc.code, exc.message)
    except OSError as exc:
        return reject("unloadable", f"cannot read file: {exc}"[:500])
    row["size_bytes"] = len(data)
    row["format"] = catalog_format(sniff.detect_format(data))
    read_sha = hashlib.sha256(data).hexdigest()
    if read_sha != entry["sha256"]:
        return reject(
            "source_changed",
            f"the file's bytes changed after planning (sha256 {entry['sha256'][:12]} planned, {read_sha[:12]} read); "
            "the next run ingests the new content",
        )
    if entry.get("duplicate_of"):
        return reject("duplicate_content", f"same bytes as file {entry['duplicate_of']}")
    hit = benchmarks.match_bytes(data) if benchmarks else None
    if hit:
        return reject("benchmark_overlap", f"the same bytes as benchmark file {hit}")
    if row["format"] == "sqlite" and (wal := _pending_wal(f.source_uri)):
        return reject(
            "sqlite_wal_pending",
            f"{wal[0]} beside the database holds {wal[1]:,} bytes of write-ahead log: its rows are not in the "
            "main file; checkpoint the database at the source (PRAGMA wal_checkpoint) and ingest again",
        )
    with tempfile.TemporaryDirectory(prefix="datamind-ingest-") as tmp:
        # The parser reads a private copy of these bytes, never the source: a database is not opened in
        # the source folder (no -shm/-wal written there) and a path swapped since the read changes nothing.
        local = os.path.join(tmp, "content" + _EXT.get(row["format"], ".bin"))
        with open(local, "wb") as fh:
            fh.write(data)
        result = parser.load(local, filename=f.filename)
    for t in result.tables if benchmarks else ():
        hit = benchmarks.match_table(t.df) if t.df is not None else None
        if hit:
            return reject("benchmark_overlap", f"table {t.name!r} is benchmark table {hit}")
    verdicts = check_tables(result, limits)
    sampled = row_sample(result, verdicts, limits, data, entry["sha256"])
    if sampled is not None:  # a CSV over the row limit, kept as a documented sample of its rows
        data, provenance["row_sample"] = sampled
        with tempfile.TemporaryDirectory(prefix="datamind-ingest-") as tmp:
            local = os.path.join(tmp, "content.csv")
            with open(local, "wb") as fh:
                fh.write(data)
            result = parser.load(local, filename=f.filename)
        verdicts = check_tables(result, limits)
    verdict = check_file(result, verdicts, limits)
    passed = [t for t, v in zip(result.tables, verdicts, strict=True) if v.accepted]
    row.update(
        format=catalog_format(result.format),
        encoding=result.encoding,
        n_tables=len(passed),
        n_rows=sum(int(t.n_rows) for t in passed),
        n_cols=sum(int(t.n_cols) for t in passed),
        table_verdicts=_verdict_rows(result, verdicts),
    )
    if not verdict.accepted:
        return reject(verdict.reason_code or "unloadable", verdict.reason or "")
    rel = posixpath.join(DIRS["raw"], source, entry["file_id"], staged_filename(f.rel_path, result.format))
    root.write_bytes(rel, data)
    row.update(
        status=ACCEPTED,
        reason_code=None,
        reason=None,
        staged_uri=root.uri(rel),
        provenance=json.dumps(provenance, sort_keys=True),
    )
    return row


def row_sample(
    result: LoadResult, verdicts: list[Verdict], limits: Limits, data: bytes, sha256: str
) -> tuple[bytes, dict[str, Any]] | None:
    """A CSV whose one table has more rows than the limit, as a seeded random sample of its data rows (the
    ``sample_rows_over_limit`` option; None where it is off or does not apply): the lines above the header and
    the header as they are, then the sampled records in file order, in the file's encoding and dialect. The
    seed is the file's content hash, so the same file always gives the same sample. Returns the sample's bytes
    and what the catalog records of it (rows kept, rows in the file, seed, the sample's sha256)."""
    n = min(limits.sample_rows_over_limit, limits.max_rows)
    if n <= 0 or result.format != "csv" or len(result.tables) != 1 or verdicts[0].reason_code != "too_many_rows":
        return None
    t = result.tables[0]
    opts = t.read_options
    encoding = result.encoding or "utf-8"
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None
    sep, quote = opts.get("sep", ","), opts.get("quotechar", '"')
    records = list(csv.reader(io.StringIO(text, newline=""), delimiter=sep, quotechar=quote))
    head = int(opts.get("header_start", 0)) + int(opts.get("header_rows", 1))
    body = [r for r in records[head:] if any(cell.strip() for cell in r)]
    if len(body) <= n:
        return None
    seed = int(sha256[:16], 16)
    keep = sorted(random.Random(seed).sample(range(len(body)), n))
    out = io.StringIO()
    newline = "\r\n" if "\r\n" in text[:65536] else "\n"
    writer = csv.writer(out, delimiter=sep, quotechar=quote, lineterminator=newline)
    writer.writerows(records[:head] + [body[i] for i in keep])
    sample = out.getvalue().encode(encoding)
    note = {"rows": n, "of_rows": len(body), "seed": seed, "sha256": hashlib.sha256(sample).hexdigest()}
    return sample, note


def _pending_wal(source_uri: str) -> tuple[str, int] | None:
    """(name, size) of a non-empty ``-wal`` file beside a local database, judged by lstat alone."""
    if "://" in source_uri:
        return None
    wal = source_uri + "-wal"
    try:
        st = os.lstat(wal)
    except OSError:
        return None
    return (os.path.basename(wal), st.st_size) if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None


def ingest_shard(
    root: DataRoot,
    shard_spec: dict[str, Any],
    limits: Limits | None,
    run_id: str | None,
    benchmarks: BenchmarkIndex | None = None,
) -> dict[str, Any]:
    """Judge, stage and catalog one shard; returns a summary (counts per status and reason).

    ``benchmarks``: tables to keep out (default: the ones ``DATAMIND_BENCHMARKS`` names, if any)."""
    limits = limits or Limits.from_env()
    source = shard_spec["source"]
    benchmarks = load_index(root) if benchmarks is None else benchmarks
    benchmarks = None if benchmarks.empty else benchmarks
    with IsolatedParser(limits) as parser:
        rows = [ingest_file(root, e, source, limits, run_id, parser, benchmarks) for e in shard_spec["files"]]
    path = write_shard(
        root,
        CATALOG_FILES,
        DIRS["catalog_files"],
        rows,
        shard_name([r["file_id"] for r in rows], prefix=f"ingest-{source}"),
    )
    reasons = Counter(r["reason_code"] for r in rows if r["status"] != ACCEPTED)
    return {
        "shard_id": shard_spec.get("shard_id"),
        "source": source,
        "files": len(rows),
        "accepted": sum(r["status"] == ACCEPTED for r in rows),
        "rejected": sum(r["status"] != ACCEPTED for r in rows),
        "reasons": dict(sorted(reasons.items())),
        "tables_accepted": sum(sum(v["status"] == ACCEPTED for v in r["table_verdicts"]) for r in rows),
        "path": path,
    }
