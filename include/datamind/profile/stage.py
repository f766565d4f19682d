"""Plan and run profiling shards: one ``catalog/tables`` row per accepted table of every accepted file.

``plan_profile`` lists accepted files of ``catalog/files`` that have no ``catalog/tables`` row yet (and
no recorded profiling failure) as small JSON shard specs. ``profile_shard`` reads each staged file once
(replaying the ``read_options`` ingestion recorded, in the capped parser child ingestion uses), profiles
the tables the ingest verdicts accepted, and writes one deterministic-named shard. A file that cannot be
profiled any more (staged copy gone, parser changed its mind, a read past the parser's caps) is recorded in
``rejections`` with stage ``profile``, never dropped silently.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow.compute as pc

from datamind import tables
from datamind.assets import DIRS
from datamind.formats import LoadedTable
from datamind.formats.parse_worker import IsolatedParser, ParserUnavailable
from datamind.ids import stable_id
from datamind.profile.meta import TableToProfile, profile_tables
from datamind.roles import with_roles
from datamind.schemas import CATALOG_TABLES, REJECTIONS, rejection
from datamind.settings import Limits
from datamind.shards import chunk, shard_name, write_shard
from datamind.stages import STAGES
from datamind.storage import DataRoot

STAGE = STAGES["profile_files"].rejections


def _profile_failures(root: DataRoot) -> set[str]:
    t = tables.read(root, "rejections", ["stage", "file_id"])
    return set(t.filter(pc.equal(t.column("stage"), STAGE)).column("file_id").to_pylist())


def plan_profile(root: DataRoot, shard_size: int, max_shards: int | None = None) -> list[dict[str, Any]]:
    accepted: set[str] = set()
    where: dict[str, set[str]] = {}  # file_id -> the catalog/files shards holding it (handed to the shard)
    for path, t in tables.each(root, "catalog_files", ["file_id", "status"]):  # one pass: status and location
        for fid, status in zip(t.column("file_id").to_pylist(), t.column("status").to_pylist(), strict=True):
            where.setdefault(fid, set()).add(path)
            if status == "accepted":
                accepted.add(fid)
    profiled = tables.read(root, "catalog_tables", ["file_id"])
    done = set(profiled.column("file_id").to_pylist())
    done |= _profile_failures(root)
    # grouped by the catalog shard holding each file, so a shard reads one or two catalog shards however many
    # the corpus has (sorted by id alone, a shard of 50 files would read 50 of them at 50,000 files)
    todo = sorted(accepted - done, key=lambda f: (min(where[f]), f))
    return [
        # the catalog files holding the shard's rows travel with it (``tables.read``'s hint)
        {
            "shard_id": stable_id("profile", part),
            "files": part,
            "sources": sorted(set().union(*(where.get(f, ()) for f in part))),
        }
        for part in chunk(todo, shard_size, max_shards)
    ]


def _fk_sentence(fks: list[dict[str, str]]) -> str:
    return (
        "Foreign keys: "
        + "; ".join(
            f"{k['from_table']}.{k['from_column']} -> {k['to_table']}.{k['to_column'] or '(primary key)'}" for k in fks
        )
        + "."
    )


def _to_profile(t: LoadedTable, provenance: dict[str, Any]) -> TableToProfile:
    """What profiling needs of a loaded table: its frame, foreign keys as a sentence, BIRD's descriptions."""
    descs = provenance.get("column_descriptions") or {}
    table_descs = {k.casefold(): v for k, v in descs.items()}.get(t.name.casefold(), {})
    description = _fk_sentence(_foreign_keys(t)) if t.foreign_keys else None
    return TableToProfile(t.as_columns(), t.name, description, table_descs)


def _foreign_keys(t: LoadedTable) -> list[dict[str, str | None]]:
    return [{k: (str(v) if v is not None else None) for k, v in fk.items()} for fk in t.foreign_keys]


def table_row(
    file_row: dict[str, Any], t: LoadedTable, prof: dict[str, Any], run_id: str | None, now: dt.datetime
) -> dict[str, Any]:
    """The ``catalog/tables`` row of a loaded table and its profile (each column's role decided here, once)."""
    fks = _foreign_keys(t)
    keys = {fk["from_column"] for fk in fks} | set(t.primary_key)
    return {
        "table_id": stable_id(file_row["file_id"], t.name),
        "file_id": file_row["file_id"],
        "source": file_row["source"],
        "format": file_row["format"],
        "table_name": t.name,
        "n_rows": prof["n_rows"],
        "n_cols": prof["n_cols"],
        "columns": prof["columns"],
        "column_profiles": with_roles(prof["column_profiles"], keys),
        "head_markdown": prof["head_markdown"],
        "description": prof["description"],
        "ddl": t.ddl,
        "foreign_keys": fks,
        "primary_key": list(t.primary_key),
        "meta_info": prof["meta_info"],
        "read_options": json.dumps(t.read_options, sort_keys=True, ensure_ascii=False),
        "staged_uri": file_row["staged_uri"],
        "profiled_at": now,
        "run_id": run_id,
    }


def _limits_admitting(verdicts: dict[str, dict[str, Any]]) -> Limits:
    """The deployment's limits, raised to the largest accepted table: the limits only decide what gets
    materialized, and nothing ingestion accepted may be skipped."""
    limits = Limits.from_env()
    largest = max([limits.max_rows] + [int(v["n_rows"]) for v in verdicts.values()])
    return limits.with_overrides(max_rows=largest, max_db_table_rows=max(largest, limits.max_db_table_rows))


# Files parsed before any of them is profiled, up to this many cells: running the parser over a group and
# then the statistics over it keeps each phase's code warm in the CPU (10-15% less CPU than alternating
# file by file, on the DABench tables), while memory holds one group's frames.
_GROUP_CELLS = 2_000_000


def _wanted(file_row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["table_name"]: v for v in file_row.get("table_verdicts") or [] if v["status"] == "accepted"}


def _load_file(
    root: DataRoot,
    file_row: dict[str, Any],
    wanted: dict[str, dict[str, Any]],
    provenance: dict[str, Any],
    parser: IsolatedParser,
) -> tuple[list[LoadedTable], str | None]:
    """(the file's tables, failure reason): one read of the staged file, with the options ingestion recorded,
    in ``parser``'s capped child: a staged copy is as untrusted as the file ingestion read, and a read past
    the caps costs this file (its reason recorded), never the shard."""
    if not wanted:
        return [], "no accepted tables recorded at ingestion"
    recorded = [json.loads(v["read_options"]) for v in wanted.values() if v.get("read_options")]
    try:
        path = root.local_copy(root.path(root.rel(file_row["staged_uri"])))
        if len(recorded) == len(wanted):
            # One read, no detection: the options ingestion recorded reproduce the tables it judged.
            result = parser.load_recorded(path, recorded, frames=False)
        else:
            # rows cataloged before read_options were recorded: detect again, like any first read of a file.
            # The original name keeps table names (a CSV's table is named after its file) as ingestion saw them.
            with IsolatedParser(_limits_admitting(wanted)) as detecting:
                result = detecting.load(path, filename=provenance.get("original_filename"))
    except ParserUnavailable:
        raise  # no child process could start: the task's fault, retried, never a property of the file
    except Exception as exc:  # a file that loaded at ingestion and fails now is recorded, never raised
        return [], f"staged file unreadable: {type(exc).__name__}: {exc}"[:500]
    if result.error:
        return [], f"staged file no longer loads: {result.error_code}: {result.error}"[:500]
    return result.tables, None


def profile_rows(
    files: list[tuple[dict[str, Any], list[LoadedTable], dict[str, Any]]], run_id: str | None, now: dt.datetime
) -> list[list[dict[str, Any]]]:
    """The ``catalog/tables`` rows of each (file row, its loaded tables, its provenance), every table of
    every file profiled together (``profile_tables``)."""
    profiles = iter(profile_tables([_to_profile(t, provenance) for _, tables, provenance in files for t in tables]))
    return [[table_row(file_row, t, next(profiles), run_id, now) for t in tables] for file_row, tables, _ in files]


def _profiled_tables(
    wanted: dict[str, dict[str, Any]], loaded: list[LoadedTable]
) -> tuple[list[LoadedTable], str | None]:
    """The loaded tables ingestion accepted, and the failure reason naming those that did not load."""
    tables = [t for t in loaded if t.name in wanted and (t.df is not None or t.columns is not None)]
    missing = [t.name for t in loaded if t.name in wanted and t.df is None and t.columns is None]
    missing += sorted(set(wanted) - {t.name for t in loaded})
    return tables, (f"tables not loadable at profiling: {', '.join(missing)}" if missing else None)


def profile_files(
    root: DataRoot, file_rows: list[dict[str, Any]], run_id: str | None, now: dt.datetime
) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
    """(catalog/tables rows, failure reason) for each accepted file, in order. Files are parsed a group
    (``_GROUP_CELLS``) at a time, then the group's tables are profiled together (``profile_tables``)."""
    group: list[tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]] = []
    cells = 0
    with IsolatedParser(Limits.from_env()) as parser:  # one capped child reads every file of the call
        for i, file_row in enumerate(file_rows):
            wanted = _wanted(file_row)
            group.append((file_row, wanted, json.loads(file_row.get("provenance") or "{}")))
            cells += sum(int(v["n_rows"] or 0) * int(v["n_cols"] or 0) for v in wanted.values())
            if cells < _GROUP_CELLS and i + 1 < len(file_rows):
                continue
            with _collector_paused():
                loaded, failures = [], []
                for file_row_, wanted_, provenance in group:
                    tables, failure = _load_file(root, file_row_, wanted_, provenance, parser)
                    if not failure:
                        tables, failure = _profiled_tables(wanted_, tables)
                    loaded.append((file_row_, tables, provenance))
                    failures.append(failure)
                done = list(zip(profile_rows(loaded, run_id, now), failures, strict=True))
            yield from done
            group, cells = [], 0


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a group is loaded and profiled: the group's thousands of small
    dicts and lists set off collections that walk every object the process holds, while the group makes
    no garbage that needs them (2-3% of profiling's CPU time on the DABench tables, in a process holding
    little else). What it leaves behind is collected once the collector is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def profile_file(
    root: DataRoot, file_row: dict[str, Any], run_id: str | None, now: dt.datetime
) -> tuple[list[dict[str, Any]], str | None]:
    """(catalog/tables rows, failure reason) for one accepted file."""
    files = profile_files(root, [file_row], run_id, now)
    try:
        return next(files)
    finally:
        files.close()  # its parser's child ends now, not when the generator is collected


_ROLES_SHOWN = 20  # tables whose column roles a shard's summary lists (the catalog holds them all)


def profile_shard(root: DataRoot, shard_spec: dict[str, Any], run_id: str | None) -> dict[str, Any]:
    """Profile one shard of accepted files into a catalog/tables shard; failures go to rejections."""
    ids = set(shard_spec["files"])
    catalog = tables.read(root, "catalog_files", where=("file_id", ids), hint=shard_spec.get("sources"))
    by_id = {r["file_id"]: r for r in catalog.to_pylist()}
    now = dt.datetime.now(dt.UTC)
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    present = [by_id[fid] for fid in sorted(ids) if fid in by_id]
    profiled = dict(zip((r["file_id"] for r in present), profile_files(root, present, run_id, now), strict=True))
    for fid in sorted(ids):
        table_rows, reason = profiled.get(fid, ([], "file_id not found in catalog/files"))
        rows.extend(table_rows)
        if reason:
            failures.append(
                rejection(
                    STAGE, stable_id(STAGE, fid), "profile_failed", reason, file_id=fid, run_id=run_id, created_at=now
                )
            )
    name = shard_name(sorted(ids), prefix="profile")
    path = write_shard(root, CATALOG_TABLES, DIRS["catalog_tables"], rows, name)
    if failures:
        write_shard(root, REJECTIONS, DIRS["rejections"], failures, name)
    kinds = Counter(p["kind"] for r in rows for p in r["column_profiles"])
    return {
        "shard_id": shard_spec.get("shard_id"),
        "files": len(ids),
        "tables": len(rows),
        "failed_files": len(failures),
        "column_kinds": dict(sorted(kinds.items())),
        # what synthesis will treat as keys, totals and rates (corrected in its form's column_roles)
        "column_roles": {
            r["table_name"]: {p["name"]: p["role"] for p in r["column_profiles"]} for r in rows[:_ROLES_SHOWN]
        },
        "path": path,
    }
