"""From ``queries`` rows to runnable tasks: the chain of hops, the staged data file, and the agent's prompts."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from datamind import categories, tables
from datamind.agent import templates
from datamind.data_source import UnsupportedSource, pandas_kwargs
from datamind.storage import DataRoot

_CSV_KEYS = {"sep", "delimiter", "encoding", "decimal", "thousands", "header", "skiprows", "quotechar", "na_values"}
_XLSX_KEYS = {"sheet_name", "header", "skiprows", "nrows", "usecols"}
_ALIASES = {"sheet": "sheet_name", "delimiter": "sep", "skip_rows": "skiprows"}


class TaskError(ValueError):
    """A query that cannot be turned into a task; ``code`` is the rejection reason code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class QueryTask:
    query: dict
    chain: list[dict]  # ancestors by hop, then the query itself
    data_path: str  # local path of the staged data file
    data_format: str  # csv | xlsx | sqlite
    read_kwargs: dict = field(default_factory=dict)
    staged_uri: str | None = None  # as recorded in the catalog (programs may name the file by it)
    read_options: dict = field(default_factory=dict)  # ingest's full recipe for the table

    @property
    def query_id(self) -> str:
        return self.query["query_id"]

    @property
    def file_name(self) -> str:
        return posixpath.basename(self.data_path)

    @property
    def language(self) -> str:
        return "sql" if self.data_format == "sqlite" else "python"


def read_kwargs(data_format: str, read_options: str | dict | None) -> dict:
    try:
        opts = json.loads(read_options) if isinstance(read_options, str) and read_options else (read_options or {})
    except json.JSONDecodeError:
        opts = {}
    allowed = _XLSX_KEYS if data_format == "xlsx" else _CSV_KEYS if data_format == "csv" else set()
    out = {}
    for k, v in (opts if isinstance(opts, dict) else {}).items():
        k = _ALIASES.get(k, k)
        if k in allowed and v is not None:
            out[k] = v
    return out


def chain_of(row: dict, by_id: dict[str, dict]) -> list[dict]:
    """Every ancestor of ``row`` (through parent_query_ids), ordered by hop, then ``row`` itself."""
    seen: dict[str, dict] = {}
    stack = list(row.get("parent_query_ids") or [])
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        parent = by_id.get(pid)
        if parent is None:
            raise TaskError("missing_parent", f"parent query {pid} of {row['query_id']} is not in the queries table")
        seen[pid] = parent
        stack.extend(parent.get("parent_query_ids") or [])
    return sorted(seen.values(), key=lambda r: (r["hop"], r["query_id"])) + [row]


@dataclass
class TaskSources:
    """Where each query's rows (its own, its ancestors', its table's and file's catalog rows) are: built by a
    planner in one pass over the three tables, so every shard it plans can read only those files
    (``load_tasks(..., sources=index.of(query_ids))``) instead of one column of every shard of each table."""

    query_path: dict[str, str] = field(default_factory=dict)
    parents: dict[str, list[str]] = field(default_factory=dict)
    table_of: dict[str, str | None] = field(default_factory=dict)
    file_of: dict[str, str | None] = field(default_factory=dict)
    table_paths: dict[str, set[str]] = field(default_factory=dict)  # every shard holding the table's rows
    file_paths: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, root: DataRoot) -> TaskSources:
        out = cls()
        cols = ["query_id", "parent_query_ids", "table_id", "file_id"]
        for path, t in tables.each(root, "queries", cols):
            for q, parents, table_id, file_id in zip(*(t.column(c).to_pylist() for c in cols), strict=True):
                out.query_path[q] = path
                out.parents[q] = parents or []
                out.table_of[q], out.file_of[q] = table_id, file_id
        out.table_paths = tables.key_paths(root, "catalog_tables", "table_id")
        out.file_paths = tables.key_paths(root, "catalog_files", "file_id")
        return out

    def of(self, query_ids: list[str]) -> dict[str, list[str]]:
        """The files holding ``query_ids``, their ancestors and their catalog rows (JSON-able, for a shard spec)."""
        chain, stack = set(), list(query_ids)
        while stack:
            q = stack.pop()
            if q not in chain:
                chain.add(q)
                stack.extend(self.parents.get(q, ()))
        return {
            "queries": sorted({self.query_path[q] for q in chain if q in self.query_path}),
            "catalog_tables": sorted(set().union(*(self.table_paths.get(self.table_of.get(q), ()) for q in chain))),
            "catalog_files": sorted(set().union(*(self.file_paths.get(self.file_of.get(q), ()) for q in chain))),
        }


def load_tasks(
    root: DataRoot, query_ids: list[str], sources: dict[str, list[str]] | None = None
) -> tuple[dict[str, QueryTask], dict[str, TaskError]]:
    """Tasks for ``query_ids``; queries that cannot run come back as errors keyed by query id. ``sources``
    (``TaskSources.of``) names the files holding the rows needed; rows not found there are looked up in
    the whole table, so a stale hint costs time, never a task."""
    sources = sources or {}
    by_id = _queries_with_ancestors(root, query_ids, sources.get("queries"))
    by_table = _rows_by(
        root,
        "catalog_tables",
        "table_id",
        ["table_id", "file_id", "format", "staged_uri", "read_options"],
        {r["table_id"] for r in by_id.values() if r.get("table_id")},
        sources.get("catalog_tables"),
    )
    file_ids = {r["file_id"] for r in by_id.values()} | {r["file_id"] for r in by_table.values()}
    by_file = _rows_by(
        root, "catalog_files", "file_id", ["file_id", "format", "staged_uri"], file_ids, sources.get("catalog_files")
    )
    tasks: dict[str, QueryTask] = {}
    errors: dict[str, TaskError] = {}
    for qid in query_ids:
        row = by_id.get(qid)
        if row is None:
            errors[qid] = TaskError("unknown_query", f"query {qid} is not in the queries table")
            continue
        try:
            tasks[qid] = _task(root, row, by_id, by_table, by_file)
        except TaskError as exc:
            errors[qid] = exc
    return tasks, errors


def _queries_with_ancestors(root: DataRoot, query_ids: list[str], paths: list[str] | None) -> dict[str, dict]:
    """The rows of ``query_ids`` and of every query their chains build on (one read per hop level)."""
    by_id: dict[str, dict] = {}
    missing = set(query_ids)
    while missing:
        rows = _rows_by(root, "queries", "query_id", None, missing, paths)
        by_id.update(rows)
        missing = {p for r in rows.values() for p in (r.get("parent_query_ids") or [])} - set(by_id)
    return by_id


def _rows_by(
    root: DataRoot, table: str, key: str, columns: list[str] | None, ids: set, paths: list[str] | None
) -> dict[str, dict]:
    """Rows whose ``key`` is in ``ids``, by key (the hinted files, then the rest of the table)."""
    return {r[key]: r for r in tables.read(root, table, columns, where=(key, ids), hint=paths).to_pylist()}


def _task(root: DataRoot, row: dict, by_id: dict, by_table: dict, by_file: dict) -> QueryTask:
    if row["category"] not in categories.CATEGORY_IDS:
        raise TaskError("unknown_category", f"category {row['category']!r} is not one of the 18 task categories")
    table = by_table.get(row.get("table_id")) if row.get("table_id") else None
    file = by_file.get(row["file_id"])
    staged = (table or {}).get("staged_uri") or (file or {}).get("staged_uri")
    fmt = row.get("data_format") or (table or {}).get("format") or (file or {}).get("format")
    if not staged:
        raise TaskError("no_data_file", f"no staged data file for table {row.get('table_id')} / file {row['file_id']}")
    if fmt not in ("csv", "xlsx", "sqlite"):
        raise TaskError("unsupported_format", f"data format {fmt!r} is not csv, xlsx or sqlite")
    try:
        path = root.local_file(staged)
    except (OSError, ValueError) as exc:
        raise TaskError("data_file_unreadable", f"{staged}: {exc}") from exc
    raw_options = (table or {}).get("read_options")
    try:
        options = json.loads(raw_options) if isinstance(raw_options, str) and raw_options else dict(raw_options or {})
    except (json.JSONDecodeError, TypeError, ValueError):
        options = {}
    return QueryTask(row, chain_of(row, by_id), path, fmt, read_kwargs(fmt, options), staged, options)


# -- prompts ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompts:
    system: str  # the task prompt the agent will see at test time: what a trajectory records and trains on
    user: str
    versions: dict[str, str]
    system_view: str = ""  # ``system`` plus the category's workflow knowledge: guides sampling only


def build_prompts(task: QueryTask, max_turns: int) -> Prompts:
    system_t = templates.load("rollout/system.j2")
    user_t = templates.load("rollout/user.j2")
    wf = templates.workflow(task.query["category"])
    reader = "pd.read_excel" if task.data_format == "xlsx" else "pd.read_csv"
    try:  # ingest's whole recipe (a title row above the header, the engine), not only the keys pandas shares
        kwargs = pandas_kwargs(task.data_format, task.read_options) if task.data_format != "sqlite" else {}
    except UnsupportedSource:
        kwargs = task.read_kwargs
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    read_hint = f"`{reader}({task.file_name!r}{args})`" if kwargs else ""
    common = dict(max_turns=max_turns, data_format=task.data_format, file_name=task.file_name)
    # The category, its workflow and how ingestion read the file steer the expert while sampling (the
    # paper's knowledge k) but never reach a training sample: at test time nobody tells the agent which of
    # the 18 categories it faces, nor how to read the file, so a sample shows it finding that out.
    system = system_t.render(**common, read_hint="", category_name="", workflow="")
    system_view = system_t.render(
        **common,
        read_hint=read_hint,
        category_name=categories.get(task.query["category"]).name,
        workflow=wf.text.strip(),
    )
    # the sheet is part of what is asked (a workbook holds several tables); how to read it is not
    sheet = task.read_kwargs.get("sheet_name") if task.data_format == "xlsx" else None
    user = user_t.render(
        file_name=task.file_name, data_format=task.data_format, question=task.query["question"], sheet=sheet
    )
    versions = {"rollout_system": system_t.version, "rollout_user": user_t.version, "workflow": wf.version}
    return Prompts(system, user, versions, system_view)
