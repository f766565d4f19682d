"""Declarative expectation suites, one per Parquet table, derived from ``datamind.schemas`` where possible.

A suite is plain data (expectation class name + keyword arguments + the reason it exists) so it can be
read, diffed and unit-tested without importing Great Expectations; ``validate.py`` turns it into GX objects.
Derived rules:
- every non-nullable column must be present and non-null (nullable columns may be absent: minor schema
  versions add them, so older shards lack them; the validator reads an absent one as all-null);
- each table's id column is unique (rejections: one row per item and stage, so reruns never duplicate);
- closed vocabularies (status, format, category, backend, ...) and numeric ranges (hop 1..5, n_rows within
  the acceptance ``Limits``) are checked value by value;
- cross-column rules live in ``semantic.py`` and are asserted through derived ``dq__*`` columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from datamind import schemas
from datamind.categories import CATEGORY_IDS
from datamind.quality import semantic
from datamind.quality.semantic import OK, RowCheck
from datamind.settings import Limits
from datamind.vocabulary import EVAL_OUTCOMES, EVAL_SUITES

FILE_STATUSES = ("accepted", "rejected")
FILE_FORMATS = ("csv", "xlsx", "sqlite", "unknown")
TABLE_FORMATS = ("csv", "xlsx", "sqlite")
BACKENDS = ("offline", "llm")
SOLUTION_LANGS = ("python", "sql")
TRAJECTORY_STATUSES = ("answered", "max_turns", "error")
MIN_HOP, MAX_HOP = 1, 5  # the paper composes 2..5 tasks; 1 is a single task

ID_COLUMNS: dict[str, tuple[str, ...]] = {
    "catalog_files": ("file_id",),
    "catalog_tables": ("table_id",),
    "queries": ("query_id",),
    "trajectories": ("trajectory_id",),
    "dataset": ("sample_id",),
    "rejections": ("item_id", "stage"),
    "eval_results": ("eval_id", "suite", "item_id", "trial"),
}

_NOT_BLANK = r"\S"  # at least one non-whitespace character
_SHA256 = r"^[0-9a-f]{64}$"
# Stages name themselves ("synth", "judge", "export", ...); the vocabulary is open, the spelling is not.
_STAGE_NAME = r"^[a-z][a-z0-9_]*$"


@dataclass(frozen=True)
class Expectation:
    type: str  # Great Expectations class name, e.g. "ExpectColumnValuesToNotBeNull"
    kwargs: dict[str, Any]
    why: str
    when: tuple[str, Any] | None = None  # (column, value): apply only to rows where column == value

    @property
    def columns(self) -> tuple[str, ...]:
        kw = self.kwargs
        if "column" in kw:
            return (kw["column"],)
        if "column_A" in kw:
            return (kw["column_A"], kw["column_B"])
        return tuple(kw.get("column_list", ()))


@dataclass(frozen=True)
class Suite:
    table_name: str
    id_column: str
    expectations: tuple[Expectation, ...]
    checks: tuple[RowCheck, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"datamind.{self.table_name}"

    def all_expectations(self) -> tuple[Expectation, ...]:
        """The column expectations plus one per semantic check (on its derived ``dq__*`` column)."""
        derived = tuple(
            Expectation("ExpectColumnValuesToBeInSet", {"column": c.column, "value_set": [OK]}, c.why)
            for c in self.checks
        )
        return self.expectations + derived


# -- building blocks ------------------------------------------------------------------------------------------
def _e(type_: str, why: str, when: tuple[str, Any] | None = None, **kwargs: Any) -> Expectation:
    return Expectation(type_, kwargs, why, when)


def _in_set(column: str, values, why: str) -> Expectation:
    return _e("ExpectColumnValuesToBeInSet", why, column=column, value_set=list(values))


def _between(column: str, lo, hi, why: str, **extra: Any) -> Expectation:
    return _e("ExpectColumnValuesToBeBetween", why, column=column, min_value=lo, max_value=hi, **extra)


def _not_blank(column: str, why: str) -> Expectation:
    return _e("ExpectColumnValuesToMatchRegex", why, column=column, regex=_NOT_BLANK)


def _non_negative(*columns: str) -> list[Expectation]:
    return [_between(c, 0, None, f"{c} is a count") for c in columns]


def contract_expectations(table: schemas.TableSchema) -> list[Expectation]:
    """What the declared schema alone implies: required columns present and non-null, ids unique."""
    required = [f.name for f in table.schema if not f.nullable]
    out = [
        _e(
            "ExpectTableColumnsToMatchSet",
            f"every required column of the declared {table.name} schema v{table.version} is present",
            column_set=required,
            exact_match=False,
        )
    ]
    out += [
        _e("ExpectColumnValuesToNotBeNull", f"{f.name} is required by the {table.name} schema", column=f.name)
        for f in table.schema
        if not f.nullable
    ]
    ids = ID_COLUMNS[table.name]
    if len(ids) == 1:
        out.append(_e("ExpectColumnValuesToBeUnique", f"{ids[0]} identifies a row", column=ids[0]))
    else:
        out.append(_e("ExpectCompoundColumnsToBeUnique", f"({', '.join(ids)}) identifies a row", column_list=list(ids)))
    return out


def _check(name: str, why: str, needs: tuple[str, ...], fn) -> RowCheck:
    return RowCheck(name, why, needs, fn)


# -- per-table suites -----------------------------------------------------------------------------------------
def _catalog_files(limits: Limits) -> Suite:
    t = schemas.CATALOG_FILES
    accepted = {"when": ("status", "accepted")}
    exps = contract_expectations(t) + [
        _in_set("status", FILE_STATUSES, "a file is either accepted or rejected"),
        _in_set("format", FILE_FORMATS, "format is detected from content"),
        _e("ExpectColumnValuesToMatchRegex", "content hash is a hex sha256", column="content_sha256", regex=_SHA256),
        *_non_negative("size_bytes"),
        _between("size_bytes", 0, limits.max_file_bytes, "larger files are rejected before parsing", **accepted),
        _e(
            "ExpectColumnValuesToNotBeNull",
            "a rejected file records why",
            column="reason_code",
            when=("status", "rejected"),
        ),
        _e("ExpectColumnValuesToNotBeNull", "an accepted file has a staged copy", column="staged_uri", **accepted),
        _between("n_tables", 1, None, "an accepted file holds at least one accepted table", **accepted),
        _between("n_rows", limits.min_rows, None, f"accepted tables have >= {limits.min_rows} rows", **accepted),
        _between("n_cols", 1, None, "accepted tables have columns", **accepted),
    ]
    checks = (
        _check(
            "verdicts_match_status",
            "table verdicts agree with the file status and n_tables",
            ("status", "n_tables", "table_verdicts"),
            semantic.accepted_file_consistent,
        ),
        _check(
            "within_size_limits",
            f"accepted tables have <= {limits.max_rows} rows (database tables <= {limits.max_db_table_rows}) "
            f"and <= {limits.max_cols} columns each",
            ("status", "n_tables", "n_rows", "n_cols", "format"),
            semantic.accepted_file_within_limits(limits.max_rows, limits.max_cols, limits.max_db_table_rows),
        ),
    )
    return Suite(t.name, "file_id", tuple(exps), checks)


def _catalog_tables(limits: Limits) -> Suite:
    t = schemas.CATALOG_TABLES
    exps = contract_expectations(t) + [
        _e(
            "ExpectCompoundColumnsToBeUnique",
            "a table name appears once per file",
            column_list=["file_id", "table_name"],
        ),
        _in_set("format", TABLE_FORMATS, "only csv, xlsx and sqlite tables are catalogued"),
        _between(
            "n_rows",
            1,
            limits.max_db_table_rows,
            f"acceptance limits: at most {limits.max_db_table_rows} rows (database tables; flat files below)",
            when=("format", "sqlite"),
        ),
        # Database tables are judged per database (small lookup tables are normal there); spreadsheet
        # tables each stand alone and must meet the minimum.
        *[
            _between(
                "n_rows",
                limits.min_rows,
                limits.max_rows,
                f"acceptance limits for {fmt} tables: {limits.min_rows}..{limits.max_rows} rows",
                when=("format", fmt),
            )
            for fmt in ("csv", "xlsx")
        ],
        _between("n_cols", 1, limits.max_cols, f"acceptance limits: 1..{limits.max_cols} columns"),
        _not_blank("table_name", "the table name is how prompts and solutions refer to it"),
    ]
    checks = (
        _check(
            "columns_match_n_cols",
            "column names and profiles agree with n_cols",
            ("n_cols", "columns", "column_profiles"),
            semantic.columns_match_count,
        ),
    )
    return Suite(t.name, "table_id", tuple(exps), checks)


def _queries(limits: Limits) -> Suite:
    t = schemas.QUERIES
    exps = contract_expectations(t) + [
        _in_set("category", CATEGORY_IDS, "one of the paper's 18 task categories"),
        _between("hop", MIN_HOP, MAX_HOP, "recursive composition chains 1..5 tasks"),
        _in_set("backend", BACKENDS, "queries come from the offline generator or an LLM"),
        _in_set("solution_lang", SOLUTION_LANGS, "reference solutions are Python or SQL"),
        _in_set("data_format", TABLE_FORMATS, "queries target catalogued table formats"),
        _not_blank("question", "an empty question cannot be answered"),
        *_non_negative("prompt_tokens", "completion_tokens"),
    ]
    checks = (
        _check(
            "lineage_matches_hop",
            "a composed query names its parents and root; a 1-hop query has none",
            ("hop", "parent_query_ids", "root_query_id"),
            semantic.lineage_matches_hop,
        ),
    )
    return Suite(t.name, "query_id", tuple(exps), checks)


def _trajectories(limits: Limits) -> Suite:
    t = schemas.TRAJECTORIES
    exps = contract_expectations(t) + [
        _e(
            "ExpectCompoundColumnsToBeUnique",
            "one trajectory per query, sample and reflection round",
            column_list=["query_id", "sample_index", "reflection_round"],
        ),
        _in_set("status", TRAJECTORY_STATUSES, "rollout ends answered, at max turns, or in error"),
        *_non_negative(
            "sample_index", "reflection_round", "n_turns", "n_void_turns", "prompt_tokens", "completion_tokens"
        ),
        _e(
            "ExpectColumnPairValuesAToBeGreaterThanB",
            "void turns are a subset of all turns",
            column_A="n_turns",
            column_B="n_void_turns",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
        ),
    ]
    checks = (
        _check(
            "answered_has_answer",
            "an answered trajectory carries its final answer",
            ("status", "final_answer"),
            semantic.answered_has_answer,
        ),
        _check(
            "messages_well_formed",
            "every trajectory has messages and every message a role",
            ("messages",),
            semantic.messages_well_formed(final_from_assistant=False),
        ),
    )
    return Suite(t.name, "trajectory_id", tuple(exps), checks)


def _dataset(limits: Limits) -> Suite:
    t = schemas.DATASET
    exps = contract_expectations(t) + [
        _e("ExpectColumnValuesToBeUnique", "a trajectory enters the product at most once", column="trajectory_id"),
        _in_set("category", CATEGORY_IDS, "one of the paper's 18 task categories"),
        _between("hop", MIN_HOP, MAX_HOP, "recursive composition chains 1..5 tasks"),
        _in_set("data_format", TABLE_FORMATS, "samples target catalogued table formats"),
        _not_blank("question", "an empty question teaches nothing"),
        _not_blank("final_answer", "kept trajectories converge to a non-empty answer"),
        *_non_negative("reflection_round"),
    ]
    checks = (
        _check(
            "messages_well_formed",
            "a training sample has messages with roles and ends on the assistant's turn",
            ("messages",),
            semantic.messages_well_formed(final_from_assistant=True),
        ),
    )
    return Suite(t.name, "sample_id", tuple(exps), checks)


def _rejections(limits: Limits) -> Suite:
    t = schemas.REJECTIONS
    exps = contract_expectations(t) + [
        _e(
            "ExpectColumnValuesToMatchRegex",
            "drops are attributed to a named stage (snake_case)",
            column="stage",
            regex=_STAGE_NAME,
        ),
        _not_blank("reason_code", "every drop records a reason code"),
        _not_blank("item_id", "a drop names the dropped item"),
    ]
    return Suite(t.name, "item_id", tuple(exps))


def _eval_results(limits: Limits) -> Suite:
    t = schemas.EVAL_RESULTS
    exps = contract_expectations(t) + [
        _in_set("suite", EVAL_SUITES, "the suites evaluate_agent knows"),
        _in_set(
            "outcome",
            EVAL_OUTCOMES,
            "every trial ends in one named outcome",
        ),
        *_non_negative("trial", "n_turns"),
        _not_blank("judge", "every verdict names the judge that gave it"),
    ]
    checks = (
        _check(
            "correct_iff_outcome_correct",
            "the verdict and the outcome agree",
            ("correct", "outcome"),
            semantic.correct_matches_outcome,
        ),
    )
    return Suite(t.name, "item_id", tuple(exps), checks)


_BUILDERS = {
    "catalog_files": _catalog_files,
    "catalog_tables": _catalog_tables,
    "queries": _queries,
    "trajectories": _trajectories,
    "dataset": _dataset,
    "rejections": _rejections,
    "eval_results": _eval_results,
}

TABLE_NAMES = tuple(_BUILDERS)


def suite_for(table_name: str, limits: Limits | None = None) -> Suite:
    """The suite for ``table_name`` under ``limits`` (default: ``Limits.from_env()``, as ingestion uses)."""
    try:
        build = _BUILDERS[table_name]
    except KeyError:
        raise ValueError(f"no quality suite for table {table_name!r}; known: {', '.join(TABLE_NAMES)}") from None
    return build(limits or Limits.from_env())
