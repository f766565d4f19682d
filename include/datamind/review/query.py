"""Read a release's samples, or one run's trajectories and rejections, a page at a time, never a whole table.

duckdb queries a pyarrow dataset over the table's Parquet files (a local folder, or object storage through
the data root's own filesystem): a page reads only the columns it shows, filters are pushed down to the
files, and pages are LIMIT/OFFSET over a stable order, so a link to page 7 or to one sample keeps meaning
the same thing. The same functions serve the UI and the benchmark script.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow.dataset as pads

from datamind.assets import DIRS
from datamind.ids import safe_run_id
from datamind.stages import STAGES
from datamind.storage import DataRoot

PAGE_SIZE = 50
PUBLISH_REJECTIONS = STAGES["publish_dataset"].rejections  # its items are judged samples, kept in ``judged``
_VERSION = re.compile(r"^v(\d+)$")


@dataclass(frozen=True)
class Source:
    """One browsable table: its files, the columns a page lists, the filters it offers, its text column."""

    kind: str  # release | trajectories | rejections
    rel_dir: str
    glob: str
    key: str  # the id column: stable order and the item link
    listed: tuple[str, ...]
    filters: tuple[str, ...]
    search: tuple[str, ...]  # columns the free-text search looks in
    run_id: str | None = None
    # rows of the table this source shows: a fixed SQL condition (never user text) and its arguments
    scope: str = ""
    scope_args: tuple = ()


RELEASE_COLUMNS = ("sample_id", "category", "hop", "data_format", "split", "answer_check", "judge_verdict",
                   "file_id", "model", "question", "final_answer")  # fmt: skip
# model: who wrote the trajectory ("written by"); question_model: who wrote the question (dataset 1.2)
RELEASE_FILTERS = ("category", "hop", "data_format", "split", "answer_check", "judge_verdict", "file_id", "model",
                   "question_model")  # fmt: skip


def release_source(version_id: str) -> Source:
    """A release's samples; the search looks in the question and the data file's name (``data_uri`` is
    ``files/<file_id>/<name>``), so a file is found by its name."""
    if not _VERSION.match(version_id):
        raise LookupError(f"no such release: {version_id!r}")
    rel = posixpath.join(DIRS["dataset"], version_id)
    return Source(
        "release", rel, "part-*.parquet", "sample_id", RELEASE_COLUMNS, RELEASE_FILTERS, ("question", "data_uri")
    )


# The judge's record of a trajectory that was fine but not the one kept for its query: not a rejection.
NOT_SELECTED = "not_selected"
RUN_KINDS = ("trajectories", "rejections", NOT_SELECTED)
_REJECTION_COLUMNS = ("item_id", "stage", "reason_code", "reason", "file_id", "query_id")


def run_source(kind: str, run_id: str | None) -> Source:
    """One run's rows of ``kind``; ``run_id`` as Airflow shows it or as the tables record it. ``rejections``
    are what a stage refused; the judge's ``not_selected`` records (another trajectory of the query was kept)
    are their own kind."""
    run_id = safe_run_id(run_id) if run_id is not None else None
    scope, scope_args = ("run_id = ?", (run_id,)) if run_id is not None else ("", ())
    if kind == "trajectories":
        return Source(
            "trajectories", DIRS["trajectories"], "**/*.parquet", "trajectory_id",
            ("trajectory_id", "query_id", "sample_index", "reflection_round", "status", "error", "n_turns",
             "final_answer"),
            ("status", "reflection_round"), ("final_answer", "error"), run_id, scope, scope_args,
        )  # fmt: skip
    if kind in ("rejections", NOT_SELECTED):
        selected = f"reason_code IS DISTINCT FROM '{NOT_SELECTED}'" if kind == "rejections" else (
            f"reason_code = '{NOT_SELECTED}'"
        )  # fmt: skip
        return Source(
            kind, DIRS["rejections"], "**/*.parquet", "item_id", _REJECTION_COLUMNS,
            ("stage", "reason_code", "file_id"), ("reason", "raw"), run_id,
            " AND ".join(c for c in (scope, selected) if c), scope_args,
        )  # fmt: skip
    raise LookupError(f"no such table to browse: {kind!r}")


def release_rejections_source(since: str | None, until: str | None) -> Source:
    """What the runs that fed a release rejected: every rejection recorded after the previous release was
    published (``since``; None for the first release) up to this one (``until``), ``not_selected`` left out.
    Each row names its run. (Publishing rewrites its own filter rejections of a partition each time it runs:
    those show under the newest release that read the partition.)"""
    clauses, args = [f"reason_code IS DISTINCT FROM '{NOT_SELECTED}'"], []
    for op, when in ((">", _instant(since)), ("<=", _instant(until))):
        if when is not None:
            clauses.append(f"created_at {op} ?")
            args.append(when)
    return Source(
        "rejections", DIRS["rejections"], "**/*.parquet", "item_id", ("item_id", "run_id", *_REJECTION_COLUMNS[1:]),
        ("stage", "reason_code", "run_id"), ("reason", "raw"), None, " AND ".join(clauses), tuple(args),
    )  # fmt: skip


def _instant(text: str | None) -> datetime | None:
    """A manifest's ISO timestamp as an aware datetime (UTC when it names no zone); None when it is not one."""
    try:
        when = datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


@dataclass
class Page:
    rows: list[dict[str, Any]]
    total: int
    page: int
    page_size: int
    facets: dict[str, list[tuple[Any, int]]] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


def _files(root: DataRoot, source: Source) -> list[str]:
    base = root.path(source.rel_dir)
    if not root.fs.exists(base):
        return []
    found = root.fs.glob(posixpath.join(base, source.glob))
    # staging and hidden files (a shard being written) are never part of a table
    return sorted(f for f in found if not any(p.startswith((".", "_")) for p in f[len(base) :].split("/")))


def _dataset(root: DataRoot, source: Source) -> pads.Dataset | None:
    files = _files(root, source)
    if not files:
        return None
    if root.is_local:
        return pads.dataset(files, format="parquet")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    return pads.dataset(files, format="parquet", filesystem=PyFileSystem(FSSpecHandler(root.fs)))


def _where(source: Source, filters: dict[str, str], text: str, columns: set[str]) -> tuple[str, list]:
    clauses, args = [], []
    if source.scope:
        clauses.append(f"({source.scope})")
        args += list(source.scope_args)
    for name in source.filters:
        value = filters.get(name)
        if value in (None, "") or name not in columns:
            continue
        if value == "(none)":
            clauses.append(f'"{name}" IS NULL')
        else:
            clauses.append(f'CAST("{name}" AS VARCHAR) = ?')
            args.append(str(value))
    if text:
        searched = [c for c in source.search if c in columns]
        if searched:
            clauses.append("(" + " OR ".join(f'"{c}" ILIKE ?' for c in searched) + ")")
            args += [f"%{text}%"] * len(searched)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


def _connect(dataset: pads.Dataset) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.register("t", dataset)
    return con


def page(
    root: DataRoot, source: Source, filters: dict[str, str] | None = None, text: str = "", number: int = 1,
    page_size: int = PAGE_SIZE,
) -> Page:  # fmt: skip
    """Page ``number`` (from 1) of the rows matching ``filters`` (column -> value; "(none)" matches null)
    and ``text`` (a case-insensitive substring of the source's text columns), with each filter's values
    and counts over the whole source."""
    dataset = _dataset(root, source)
    number = max(1, int(number))
    if dataset is None:
        return Page([], 0, number, page_size)
    columns = set(dataset.schema.names)
    where, args = _where(source, filters or {}, text.strip(), columns)
    listed = ", ".join(f'"{c}"' for c in source.listed if c in columns)
    with _connect(dataset) as con:
        total = con.execute(f"SELECT count(*) FROM t {where}", args).fetchone()[0]
        cur = con.execute(
            f'SELECT {listed} FROM t {where} ORDER BY "{source.key}" LIMIT ? OFFSET ?',
            [*args, page_size, (number - 1) * page_size],
        )
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        scope, scope_args = (f"WHERE ({source.scope})", list(source.scope_args)) if source.scope else ("", [])
        facets = {}
        for name in source.filters:
            if name in columns:
                got = con.execute(
                    f'SELECT "{name}", count(*) FROM t {scope} GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 200', scope_args
                ).fetchall()
                facets[name] = [(v if v is not None else "(none)", n) for v, n in got]
    return Page(rows, int(total), number, page_size, facets)


def item(root: DataRoot, source: Source, key: str) -> dict[str, Any] | None:
    """One whole row by its id (messages included), or None."""
    dataset = _dataset(root, source)
    if dataset is None:
        return None
    where, args = _where(source, {}, "", set(dataset.schema.names))
    where = f"{where} AND" if where else "WHERE"
    with _connect(dataset) as con:
        cur = con.execute(f'SELECT * FROM t {where} "{source.key}" = ? LIMIT 1', [*args, key])
        names = [d[0] for d in cur.description]
        found = cur.fetchone()
    return dict(zip(names, found, strict=True)) if found else None


def trajectories_of(root: DataRoot, query_id: str, limit: int = 6) -> list[dict[str, Any]]:
    """The sampled trajectories of one query (any run), to show what a rejection was about."""
    source = Source("trajectories", DIRS["trajectories"], "**/*.parquet", "trajectory_id", (), (), ())
    dataset = _dataset(root, source)
    if dataset is None:
        return []
    with _connect(dataset) as con:
        cur = con.execute(
            "SELECT * FROM t WHERE query_id = ? ORDER BY reflection_round, sample_index LIMIT ?", [query_id, limit]
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def judged_sample(root: DataRoot, sample_id: str) -> dict[str, Any] | None:
    """A judged sample (what publishing's filters dropped is still there), by id."""
    source = Source("judged", DIRS["judged"], "**/*.parquet", "sample_id", (), (), ())
    return item(root, source, sample_id)


def releases(root: DataRoot) -> list[dict[str, Any]]:
    """Every complete release, newest first: version id, samples, audit misses, promotion."""
    from datamind.tables import read_manifest, versions

    out = []
    for number, complete in reversed(versions(root)):
        m = read_manifest(root, number) if complete else None
        if m is None:
            continue
        out.append(
            {
                "version_id": f"v{number}",
                "version": number,
                "n_samples": m.get("n_samples"),
                "created_at": m.get("created_at"),
                "misses": (m.get("audit") or {}).get("misses") or [],
                "promotion": m.get("promotion") or {},
                "run_id": m.get("run_id"),
            }
        )
    return out


def manifest(root: DataRoot, version_id: str) -> dict[str, Any] | None:
    from datamind.tables import read_manifest

    m = _VERSION.match(version_id)
    return read_manifest(root, int(m.group(1))) if m else None
