"""One catalog table -> its query rows, offline: load, pick columns, generate, execute, compose, dedup.

Loading reads the staged file, which is as untrusted as the file ingestion read: the reference frame (ingest's
loader replaying ``read_options``) and every reader's frame are read in the capped parser child
(``IsolatedParser``, one per shard), so a read past its caps is this table's ``parse_limit`` rejection and
never this process's memory; generated programs then run on the frames that came back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from datamind.data_source import (
    READERS,
    Exclusion,
    Source,
    UnsupportedSource,
    open_source,
    parse_read_options,
)
from datamind.formats.parse_worker import IsolatedParser, ParseLimit, ParserUnavailable
from datamind.phrasing import glossary, polish_question, scope_question
from datamind.roles import parse_overrides, table_roles
from datamind.settings import Limits
from datamind.storage import DataRoot
from datamind.synth import rows as R
from datamind.synth.dedup import near_duplicates
from datamind.synth.offline.columns import TableView, build_view, python_scalar
from datamind.synth.offline.compose import Hop, build_chains
from datamind.synth.offline.engine import Rejected, Skip, synthesize_offline
from datamind.synth.offline.execute import ExecutionError, run_in_subprocess, run_solution
from datamind.synth.offline.generators import OFFLINE_TEMPLATES_VERSION
from datamind.synth.offline.variants import runnable_variants
from datamind.synth.params import SynthParams

log = logging.getLogger(__name__)


class TableUnusable(Exception):
    def __init__(self, reason_code: str, reason: str):
        super().__init__(reason)
        self.reason_code = reason_code
        self.reason = reason


@dataclass
class TableOutput:
    rows: list[dict] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    chains: list[list[Hop]] = field(default_factory=list)
    chain_rows: list[list[dict]] = field(default_factory=list)  # query rows of each chain, hop order
    source: Source | None = None  # how the table is read (the LLM path shows it and runs its programs on it)


def data_path(root: DataRoot, staged_uri: str) -> str:
    """Local filesystem path of a staged file (a relative ``staged_uri`` is under the data root)."""
    return root.local_file(staged_uri)


def _ingest_frame(parser: IsolatedParser, path: str, read_options: dict) -> pd.DataFrame | None:
    """The frame the profiler saw (``datamind.formats`` replaying ``read_options``, in ``parser``'s capped
    child); None without a recipe."""
    if "format" not in read_options:
        return None
    result = parser.load_recorded(path, [read_options], frames=True)
    if result.error_code == "parse_limit":
        raise TableUnusable("parse_limit", f"ingest loader: {result.error}")
    if result.error:
        raise TableUnusable("table_unreadable", f"ingest loader failed: {result.error}")
    return result.tables[0].df


def same_frame(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Same shape, names and cell values (numbers within float tolerance, missing == missing)."""
    if a.shape != b.shape or [str(c) for c in a.columns] != [str(c) for c in b.columns]:
        return False
    if a.equals(b):
        return True
    for i in range(a.shape[1]):
        x, y = a.iloc[:, i].reset_index(drop=True), b.iloc[:, i].reset_index(drop=True)
        if not x.isna().equals(y.isna()):
            return False
        mask = x.notna()
        if pd.api.types.is_datetime64_any_dtype(x) or pd.api.types.is_datetime64_any_dtype(y):
            # compare instants, not their integer encodings (datetime64[s] and [us] hold other numbers)
            if not (pd.to_datetime(x[mask], errors="coerce") == pd.to_datetime(y[mask], errors="coerce")).all():
                return False
            continue
        xn, yn = pd.to_numeric(x[mask], errors="coerce"), pd.to_numeric(y[mask], errors="coerce")
        if xn.notna().all() and yn.notna().all():
            if not np.allclose(xn.astype(float), yn.astype(float), rtol=1e-9, atol=1e-12):
                return False
        elif not (x[mask].astype(str) == y[mask].astype(str)).all():
            return False
    return True


@contextlib.contextmanager
def table_reader(parser: IsolatedParser | None = None):
    """``parser``, or a capped parser child of this call's own, closed when the call ends (its start is ~0.45 s:
    a shard opens one for all its tables)."""
    if parser is not None:
        yield parser
        return
    with IsolatedParser(Limits.from_env()) as own:
        yield own


def load_view(
    root: DataRoot, table: dict, column_roles: tuple[str, ...] = (), parser: IsolatedParser | None = None
) -> tuple[Source, TableView]:
    """Pick how reference programs read the table: the plainest reader whose frame equals ingest's.

    Plain pandas when it reproduces the frame the profiler saw, then plain pandas plus ingest's cell
    tidying, and for report-style sheets a header-less read repaired by hand. Every read runs in
    ``parser``'s capped child (one of this call's own without it); ``ParserUnavailable`` (no child could
    start) is raised, a read past the caps is ``TableUnusable("parse_limit")``.
    """
    with table_reader(parser) as reader:
        return _load_view(root, table, column_roles, reader)


def _load_view(
    root: DataRoot, table: dict, column_roles: tuple[str, ...], parser: IsolatedParser
) -> tuple[Source, TableView]:
    try:
        path = data_path(root, table["staged_uri"])
        options = parse_read_options(table.get("read_options"))
    except (UnsupportedSource, KeyError, OSError) as exc:
        raise TableUnusable("unsupported_source", str(exc)) from exc
    fmt = table.get("format")
    reference = None
    if fmt in ("csv", "xlsx", "xls", "sqlite"):
        reference = _ingest_frame(parser, path, options)
    errors = []
    for reader in READERS if fmt != "sqlite" else ("plain",):
        try:
            source, df = parser.call(open_source, table, path, reader)
        except ParserUnavailable:
            raise
        except ParseLimit as exc:  # the next reader reads the same bytes: the table is rejected now
            raise TableUnusable("parse_limit", f"{reader} reader: {exc}") from exc
        except UnsupportedSource as exc:
            if fmt not in ("csv", "xlsx", "xls", "sqlite"):
                raise TableUnusable("unsupported_source", str(exc)) from exc
            errors.append(f"{reader}: {exc}")
            continue
        except Exception as exc:
            errors.append(f"{reader}: {type(exc).__name__}: {exc}")
            continue
        own = df.iloc[:, : df.shape[1] - len(source.joins)]
        if reference is None or same_frame(own, reference):
            expected = table.get("columns")
            if expected is not None and len(expected) and own.shape[1] != len(expected):
                errors.append(f"{reader}: reads {own.shape[1]} columns, catalog has {len(expected)}")
                continue
            keys = {j.fk_column for j in source.joins} | {
                fk.get("from_column") for fk in table.get("foreign_keys") or []
            }
            roles = table_roles(table, parse_overrides(column_roles))
            exclusion = aggregate_exclusion(table, df, list(own.columns))
            if exclusion is not None:
                source = dataclasses.replace(source, exclude=exclusion)
                df = leave_out(df, exclusion)
            labels = {j.alias: j.fk_column for j in source.joins}
            return source, build_view(df, table.get("column_profiles"), keys, roles, labels)
        errors.append(f"{reader}: frame differs from the ingest loader's")
    raise TableUnusable("table_unreadable", "; ".join(errors)[:1000])


MAX_AGGREGATE_VALUES = 12  # values a question may list to name the aggregate rows it leaves out


def aggregate_exclusion(table: dict, df: pd.DataFrame, own: list | None = None) -> Exclusion | None:
    """How programs leave out the aggregate rows profiling found (``meta_info["aggregate_rows"]``): the values
    of one of the table's ``own`` columns (not a joined parent's) that name exactly those rows in ``df`` (the
    frame every program reads: its rows are the profiled frame's, in order), the recorded label column first,
    else a column whose values on those rows no other row has. None when the table has none;
    ``TableUnusable`` when no column names them in a few values."""
    try:
        found = json.loads(table.get("meta_info") or "{}").get("aggregate_rows")
    except (json.JSONDecodeError, AttributeError):
        return None
    if not found or not found.get("rows"):
        return None
    rows = [int(i) for i in found["rows"]]
    if len(rows) < int(found.get("count", len(rows))) or max(rows) >= len(df):
        raise TableUnusable("aggregate_rows", f"{found.get('count')} aggregate rows, not all of them located")
    wanted = np.zeros(len(df), bool)
    wanted[rows] = True
    own = list(df.columns) if own is None else own
    columns = [found["label_column"]] if found.get("label_column") in own else []
    columns += [c for c in own if c not in columns and not str(c).startswith("Unnamed: ")]
    for col in columns:
        values = df[col].iloc[rows]
        if values.isna().any():
            continue
        picked = tuple(dict.fromkeys(python_scalar(v) for v in values))
        if len(picked) > MAX_AGGREGATE_VALUES or any(isinstance(v, float) and not math.isfinite(v) for v in picked):
            continue
        if not isinstance(picked[0], (str, int, float)) or isinstance(picked[0], bool):
            continue
        if (df[col].isin(list(picked)).to_numpy() == wanted).all():
            return Exclusion(str(col), picked)
    raise TableUnusable(
        "aggregate_rows",
        f"{len(rows)} aggregate rows (totals of other rows) that no column names in {MAX_AGGREGATE_VALUES} values or "
        "fewer: " + "; ".join(found.get("evidence") or [])[:500],
    )


def leave_out(df: pd.DataFrame, exclusion: Exclusion) -> pd.DataFrame:
    """``df`` as the programs' leaving-out line leaves it (the same code, so the frames agree)."""
    namespace = {"df": df, "pd": pd}
    exec(compile(exclusion.python(), "<leave_out>", "exec"), namespace)  # noqa: S102 - own generated code
    return namespace["df"]


def _tables_of(table: dict, source: Source) -> list[str]:
    return [table["table_name"]] + [j.parent_table for j in source.joins]


def synthesize_table_offline(
    root: DataRoot,
    table: dict,
    params: SynthParams,
    run_id: str | None,
    with_singles: bool = True,
    chain_roots: Collection[str] | None = None,
    parser: IsolatedParser | None = None,
) -> TableOutput:
    """Offline questions for one table; a failure on this table is a rejection, never a lost shard.
    ``chain_roots``: the categories a chain's first hop may have (default any). ``parser``: the shard's
    capped parser child that reads the staged file (``load_view``)."""
    try:
        return _synthesize_table_offline(root, table, params, run_id, with_singles, chain_roots, parser)
    except ParserUnavailable:
        raise  # no parser child could start: the task's fault (retried), not this table's
    except Exception as exc:  # noqa: BLE001 - recorded with the traceback in the log
        log.exception("offline synthesis failed for table %s", table.get("table_id"))
        out = TableOutput()
        out.rejections.append(
            R.rejection_row(
                key=(params.fingerprint, table.get("table_id"), "table"),
                reason_code="synthesis_error",
                reason=f"{type(exc).__name__}: {exc}"[:1000],
                file_id=table.get("file_id"),
                run_id=run_id,
            )
        )
        return out


def _synthesize_table_offline(
    root: DataRoot,
    table: dict,
    params: SynthParams,
    run_id: str | None,
    with_singles: bool,
    chain_roots: Collection[str] | None,
    parser: IsolatedParser | None,
) -> TableOutput:
    out = TableOutput()
    fp = params.fingerprint
    tid = table["table_id"]
    try:
        source, view = load_view(root, table, params.column_roles, parser)
    except TableUnusable as exc:
        out.rejections.append(
            R.rejection_row(
                key=(fp, tid, "table"),
                reason_code=exc.reason_code,
                reason=exc.reason,
                file_id=table.get("file_id"),
                run_id=run_id,
            )
        )
        return out
    out.source = source
    tables = _tables_of(table, source)
    version = OFFLINE_TEMPLATES_VERSION
    with tempfile.TemporaryDirectory(prefix="synth-variants-") as scratch:
        job = _OfflineJob(table, source, view, tables, version, params, run_id, with_singles, chain_roots, scratch)
        _offline_rows(out, job)
    return out


@dataclass(frozen=True)
class _OfflineJob:
    """One table's offline synthesis: the table, its loaded view, what to make and where to try variants."""

    table: dict
    source: Source
    view: TableView
    tables: list[str]  # the tables a question may name
    version: str  # the offline templates' version
    params: SynthParams
    run_id: str | None
    with_singles: bool
    chain_roots: Collection[str] | None  # the categories a chain's first hop may have (None: any)
    scratch: str  # a folder to run reference variants in


def _offline_rows(out: TableOutput, job: _OfflineJob) -> None:
    table, source, view, tables, version = job.table, job.source, job.view, job.tables, job.version
    params, run_id, with_singles, chain_roots, scratch = (
        job.params,
        job.run_id,
        job.with_singles,
        job.chain_roots,
        job.scratch,
    )
    fp = params.fingerprint
    terms = glossary(table.get("column_profiles"))  # units and scales from the column descriptions
    tid = table["table_id"]

    def scoped(question: str) -> str:
        question = scope_question(question, source.scope, view.df.columns)
        # a table with totals beside its rows: every program leaves them out, and the question says so
        return f"{question} {source.exclude.sentence()}" if source.exclude else question

    if with_singles:
        result = synthesize_offline(view, source, params.categories, params.queries_per_category, params.seed, tid)
        out.skips.extend(result.skips)
        for category in params.categories:
            for cand in result.candidates.get(category, []):
                out.rows.append(
                    R.query_row(
                        fingerprint=fp,
                        table=table,
                        tables=tables,
                        category=category,
                        hop=cand.task.hops,
                        parents=[],
                        root_id=None,
                        question=polish_question(scoped(cand.task.question), cand.answer, terms, cand.solution),
                        description=cand.task.description,
                        lang=cand.lang,
                        solution=cand.solution,
                        answer=cand.answer,
                        backend="offline",
                        model=None,
                        template_version=f"{version}/{cand.task.template}",
                        run_id=run_id,
                        variants=runnable_variants(cand.task, source, cand.lang, scratch, view.df),
                    )
                )
        for task, error in result.failures:
            level = logging.WARNING if error.startswith("template error") else logging.DEBUG
            log.log(level, "table %s: %s/%s dropped: %s", tid, task.category, task.template, error)
        _record_rejected(out, job, result.rejected)

    if params.n_chains:
        rejected: list[Rejected] = []
        chains = build_chains(
            view, source, params.n_chains, params.min_hops, params.max_hops, params.seed, tid, chain_roots, rejected
        )
        _record_rejected(out, job, rejected)
        if not chains:
            starting = " whose first question is of a requested category" if chain_roots is not None else ""
            out.skips.append(
                Skip(
                    "composition",
                    "unsupported_table",
                    f"no chain of {params.min_hops}-{params.max_hops} hops{starting} fits this table",
                )
            )
        for chain in chains:
            chain_rows: list[dict] = []
            for k, hop in enumerate(chain, start=1):
                parents = [chain_rows[-1]["query_id"]] if chain_rows else []
                chain_rows.append(
                    R.query_row(
                        fingerprint=fp,
                        table=table,
                        tables=tables,
                        category=hop.task.category,
                        hop=k,
                        parents=parents,
                        root_id=chain_rows[0]["query_id"] if chain_rows else None,
                        question=polish_question(scoped(hop.task.question), hop.answer, terms, hop.solution),
                        description=hop.task.description,
                        lang=hop.lang,
                        solution=hop.solution,
                        answer=hop.answer,
                        backend="offline",
                        model=None,
                        template_version=f"{version}/{hop.task.template}",
                        run_id=run_id,
                        variants=runnable_variants(hop.task, source, hop.lang, scratch, view.df),
                    )
                )
            out.chains.append(chain)
            out.chain_rows.append(chain_rows)
            out.rows.extend(chain_rows)


def _record_rejected(out: TableOutput, job: _OfflineJob, rejected: list[Rejected]) -> None:
    """Questions dropped for what their answer is (written in the program or the question, fixed by how they were
    built, a chain that loops): one rejection each, with its reason (a random walk meets the same one again)."""
    seen = {r["item_id"] for r in out.rejections}
    for r in rejected:
        row = R.rejection_row(
            key=(job.params.fingerprint, job.table["table_id"], r.code, r.task.template, r.task.question),
            reason_code=r.code,
            reason=f"{r.task.category}/{r.task.template}: {r.reason}"[:1000],
            file_id=job.table.get("file_id"),
            raw=f"{r.task.question}\n\n{r.solution}".strip(),
            run_id=job.run_id,
        )
        if row["item_id"] not in seen:
            seen.add(row["item_id"])
            out.rejections.append(row)


def dedup_rows(
    rows: list[dict], threshold: float, fingerprint: str, run_id: str | None
) -> tuple[list[dict], list[dict]]:
    """Merge identical ids, drop near-duplicate questions (never a chain parent); rejections for drops."""
    by_id: dict[str, dict] = {}
    for row in rows:
        by_id.setdefault(row["query_id"], row)
    ordered = sorted(by_id.values(), key=lambda r: r["hop"])  # stable: singles, then chain hops in order
    parents = {p for r in ordered for p in r["parent_query_ids"]}
    kept, dropped = near_duplicates(
        ordered, lambda r: r["question"], threshold, protected=lambda r: r["query_id"] in parents
    )
    # A chain hop whose parent was merged away keeps its lineage, since merging only removes exact copies.
    rejections = [
        R.rejection_row(
            key=(fingerprint, row["query_id"], "near_duplicate"),
            reason_code="near_duplicate",
            reason=f"Jaccard {sim:.2f} >= {threshold} with query {other['query_id']}: {other['question'][:200]}",
            file_id=row["file_id"],
            query_id=row["query_id"],
            raw=row["question"],
            run_id=run_id,
        )
        for row, other, sim in dropped
    ]
    return kept, rejections


def verify_rows(
    root: DataRoot, rows: list[dict], tables: dict[str, dict], params: SynthParams, run_id: str | None
) -> tuple[list[dict], list[dict]]:
    """Run every stored reference program from its own text in one fresh interpreter.

    A row whose program fails, or prints something other than its stored answer, is dropped with a
    ``reference_unverified`` rejection, and so are the chain hops built on it.
    """
    # Only the engine's own programs: a model-written program already ran in the sandbox and never runs
    # outside it.
    checked = [r for r in rows if r.get("reference_solution") and r.get("backend") != "llm"]
    jobs = [
        {
            "lang": r["solution_lang"],
            "solution": r["reference_solution"],
            "db_path": data_path(root, tables[r["table_id"]]["staged_uri"]),
        }
        for r in checked
    ]
    results = run_in_subprocess(jobs, per_job_timeout_s=params.solution_timeout_s)
    bad: dict[str, str] = {}
    for row, res in zip(checked, results, strict=True):
        if not res["ok"]:
            bad[row["query_id"]] = f"reference solution failed when run on its own: {res['error']}"[:1000]
        elif res["answer"] != row["reference_answer"]:
            bad[row["query_id"]] = (
                f"run on its own it printed {res['answer'][:200]!r}, expected {row['reference_answer'][:200]!r}"
            )
    for row in sorted(rows, key=lambda r: r["hop"]):
        if row["query_id"] not in bad and any(p in bad for p in row["parent_query_ids"]):
            bad[row["query_id"]] = "built on a parent query whose reference solution did not verify"
    kept = [r for r in rows if r["query_id"] not in bad]
    rejections = [
        R.rejection_row(
            key=(params.fingerprint, r["query_id"], "verify"),
            reason_code="reference_unverified",
            reason=bad[r["query_id"]],
            file_id=r["file_id"],
            query_id=r["query_id"],
            raw=r["reference_solution"],
            run_id=run_id,
        )
        for r in rows
        if r["query_id"] in bad
    ]
    return kept, rejections


def replay_chain(chain_rows: list[dict], db_path: str | None = None) -> list[str]:
    """Re-run a chain's reference solutions in order (what a multi-turn replay does); their answers."""
    answers = []
    for row in chain_rows:
        try:
            answers.append(run_solution(row["solution_lang"], row["reference_solution"], db_path))
        except ExecutionError as exc:
            answers.append(f"error: {exc}")
    return answers
