"""Validate one stage output table and publish its report under the data root.

``validate_table`` runs the table's Great Expectations suite and writes, below ``reports/<stage>/<run_id>/``:

- ``validation.json``: the full GX validation result (every expectation, observed values, samples);
- ``summary.json``: counts and distributions (see ``summaries``), the failed expectations, and links;
- ``data_docs/index.html``: GX Data Docs, openable from disk;

then regenerates ``reports/index.html``, the one page listing every report. One stage run reports on one
table: validating a second table under the same stage and run id is refused (pass a distinct ``stage``, e.g.
``judge_rejections``), while validating the same table again (a task retry) replaces the report.
Data Docs are built in a local temporary folder and copied file by file with atomic writes, so remote
(fsspec) data roots work too.
A failed expectation is never silent: the report says so, a WARNING names the report, and with
``raise_on_failure=True`` a ``QualityError`` carrying the report is raised after everything is written.
The caller logs ``report.summary_text`` (the task-log summary).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa

from datamind import schemas
from datamind.quality import gx_runner
from datamind.quality.report_index import REPORTS, path_segment, rebuild_index
from datamind.quality.report_page import render_report
from datamind.quality.suites import Suite, suite_for
from datamind.quality.summaries import format_summary, summarize
from datamind.settings import Limits
from datamind.storage import DataRoot

log = logging.getLogger(__name__)

_MAX_EXAMPLES = 5
_MAX_EXAMPLE_CHARS = 200


class QualityError(RuntimeError):
    """Raised by ``validate_table(..., raise_on_failure=True)`` when an expectation fails."""

    def __init__(self, report: QualityReport) -> None:
        super().__init__(report.summary_text)
        self.report = report


@dataclass
class QualityReport:
    table_name: str
    stage: str
    run_id: str
    suite_name: str
    success: bool
    statistics: dict  # evaluated/successful/unsuccessful_expectations, success_percent
    failures: list[dict]  # one per failed expectation: what, where, how many, examples
    summary: dict  # see summaries.summarize
    summary_text: str  # multi-line, for the task log
    report_dir: str  # relative to the data root
    uris: dict[str, str] = field(default_factory=dict)  # validation, summary, data_docs, index

    @property
    def location(self) -> str:
        """URI of the report folder (validation.json, summary.json, data_docs/)."""
        return self.uris.get("report_dir", self.report_dir)

    def failed(self, expectation_type: str, column: str | None = None) -> list[dict]:
        """Failures of one expectation type (snake_case, as GX names it), optionally on one column."""
        return [
            f
            for f in self.failures
            if f["expectation"] == expectation_type and (column is None or f["column"] == column)
        ]

    def to_dict(self) -> dict:
        return asdict(self)


# -- paths ------------------------------------------------------------------------------------------------------
def report_dir(stage: str, run_id: str) -> str:
    return posixpath.join(REPORTS, path_segment(stage, "stage"), path_segment(run_id, "run_id"))


def reported_runs(root: DataRoot, stage: str) -> set[str]:
    """Run ids whose rows of ``stage`` some report has validated (their own, or a later run's that covered them)."""
    stage_dir = posixpath.join(REPORTS, path_segment(stage, "stage"))
    runs: set[str] = set()
    for path in root.glob(stage_dir, "*/summary.json"):
        try:
            doc = json.loads(root.read_text(root.rel(path)))
        except (ValueError, OSError):
            continue  # an unreadable report validates nothing
        runs.add(str(doc.get("run_id")))
        runs.update(str(r) for r in doc.get("covers_runs") or [])
    return runs


def _claim(root: DataRoot, rel_dir: str, table_name: str) -> None:
    """Refuse to overwrite another table's report in the same stage run (a retry of the same table is fine)."""
    rel = posixpath.join(rel_dir, "summary.json")
    if not root.exists(rel):
        return
    try:
        owner = json.loads(root.read_text(rel)).get("table")
    except ValueError:
        return  # unreadable: the new report replaces it
    if owner and owner != table_name:
        raise ValueError(
            f"{root.uri(rel_dir)} already holds the {owner!r} report of this run; "
            f"validate {table_name!r} under a distinct stage name"
        )


# -- frames -----------------------------------------------------------------------------------------------------
def to_frame(data) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return data.to_pandas()
    raise TypeError(f"expected a pandas DataFrame or an Arrow table, got {type(data).__name__}")


def with_absent_nullable_columns(table_name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Shards written before a minor schema version lack its new nullable columns: read them as all-null."""
    absent = [f.name for f in schemas.ALL[table_name].schema if f.nullable and f.name not in df.columns]
    return df.assign(**{name: pd.Series([None] * len(df), index=df.index, dtype=object) for name in absent})


def with_derived_columns(suite: Suite, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus one ``dq__<check>`` column per semantic check (``"ok"`` or the row's problem)."""
    if not suite.checks:
        return df
    derived = {c.column: c.evaluate(df, suite.id_column) for c in suite.checks}
    return df.assign(**derived)


# -- results ----------------------------------------------------------------------------------------------------
def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _MAX_EXAMPLE_CHARS else text[: _MAX_EXAMPLE_CHARS - 1] + "…"


def _exception_message(info) -> str | None:
    if not info:
        return None
    if "raised_exception" in info:
        infos = [info]
    else:  # GX 1.x may key exception info by metric
        infos = [v for v in info.values() if isinstance(v, dict)]
    for i in infos:
        if i.get("raised_exception"):
            return _short(i.get("exception_message") or "expectation raised an exception")
    return None


def _condition(kwargs: dict) -> str | None:
    cond = kwargs.get("row_condition")
    if isinstance(cond, dict):  # a serialized GX Condition
        if cond.get("type") == "comparison":
            col = (cond.get("column") or {}).get("name")
            return f"{col} {cond.get('operator')} {json.dumps(cond.get('parameter'), default=str)}"
        return cond.get("pass_through_filter") or json.dumps(cond, sort_keys=True, default=str)
    return cond or None


def extract_failures(validation: dict) -> list[dict]:
    out = []
    for r in validation.get("results", []):
        if r.get("success"):
            continue
        cfg = r.get("expectation_config") or {}
        kw = cfg.get("kwargs") or {}
        res = r.get("result") or {}
        columns = [kw[k] for k in ("column", "column_A", "column_B") if k in kw] + list(kw.get("column_list") or [])
        if "partial_unexpected_counts" in res:
            examples = [f"{_short(c['value'])} (x{c['count']})" for c in res["partial_unexpected_counts"]]
        elif "partial_unexpected_list" in res:
            examples = [_short(v) for v in res["partial_unexpected_list"]]
        elif "details" in res:
            examples = [_short(res["details"])]
        else:
            examples = [_short(res["observed_value"])] if "observed_value" in res else []
        out.append(
            {
                "expectation": cfg.get("type"),
                "column": ",".join(columns) or None,
                "row_condition": _condition(kw),
                "why": cfg.get("notes"),
                "element_count": res.get("element_count"),
                "unexpected_count": res.get("unexpected_count"),
                "unexpected_percent": res.get("unexpected_percent"),
                "examples": examples[:_MAX_EXAMPLES],
                "error": _exception_message(r.get("exception_info")),
            }
        )
    return out


def _failure_line(f: dict) -> str:
    where = f" on {f['column']}" if f["column"] else ""
    if f["row_condition"]:
        where += f" where {f['row_condition']}"
    if f["error"]:
        what = f"error: {f['error']}"
    elif f["unexpected_count"] is not None:
        pct = f" ({f['unexpected_percent']:.1f}%)" if f["unexpected_percent"] is not None else ""
        what = f"{f['unexpected_count']} of {f['element_count']} unexpected{pct}"
    else:
        what = "failed"
    eg = f"; e.g. {', '.join(f['examples'][:3])}" if f["examples"] else ""
    return f"FAILED {f['expectation']}{where}: {what}{eg}"


def summary_text(
    table: str, stage: str, run_id: str, success: bool, stats: dict, summary: dict, failures: list[dict], docs_uri: str
) -> str:
    n_eval = stats.get("evaluated_expectations", 0)
    n_bad = stats.get("unsuccessful_expectations", 0)
    verdict = f"PASSED all {n_eval}" if success else f"FAILED {n_bad} of {n_eval}"
    head = f"data quality {table} (stage {stage}, run {run_id}): {verdict} expectations, {summary['n_rows']} rows"
    lines = [head] + [f"  {line}" for line in format_summary(summary)]
    lines += [f"  {_failure_line(f)}" for f in failures]
    lines.append(f"  Data Docs: {docs_uri}")
    return "\n".join(lines)


# -- entry point ------------------------------------------------------------------------------------------------
def validate_table(
    root: DataRoot,
    table_name: str,
    df_or_arrow,
    run_id: str,
    stage: str,
    *,
    raise_on_failure: bool = False,
    limits: Limits | None = None,
    related: Mapping[str, object] | None = None,
    update_index: bool = True,
    covers_runs: list[str] | None = None,
    counts: Mapping | None = None,
    origin: Mapping | None = None,
    release: Mapping | None = None,
) -> QualityReport:
    """Validate ``df_or_arrow`` (one table's rows) and publish its report; see the module docstring.

    ``related`` optionally passes other tables (pandas or Arrow) for the summary: ``trajectories`` gives the
    consistency rate and rescue yield of a ``dataset`` table, ``rejections`` adds drop reasons.
    ``limits`` defaults to ``Limits.from_env()``, the limits ingestion applies. ``covers_runs`` names other
    runs whose rows are validated here too (runs killed before their own report), recorded in summary.json.
    ``counts`` (the stage's own numbers in and out) and ``origin`` (``dag_id``, ``task_id``) go into the
    report as given; so does ``release`` (a dataset release: its version, audit verdicts and promotion),
    which the report shows first.
    """
    suite = suite_for(table_name, limits)
    df = with_absent_nullable_columns(table_name, to_frame(df_or_arrow))
    related_frames = {k: to_frame(v) for k, v in (related or {}).items()}
    summary = summarize(table_name, df, related_frames)
    rel_dir = report_dir(stage, run_id)
    _claim(root, rel_dir, table_name)
    docs_rel = posixpath.join(rel_dir, "data_docs")

    with tempfile.TemporaryDirectory(prefix="datamind-gx-") as tmp:
        validation = gx_runner.run_suite(suite, with_derived_columns(suite, df), path_segment(run_id, "run_id"), tmp)
        # A retry replaces the previous attempt's pages instead of leaving stale ones next to them.
        root.remove(docs_rel)
        for rel in gx_runner.docs_files(tmp):
            with open(os.path.join(tmp, rel), "rb") as fh:
                root.write_bytes(posixpath.join(docs_rel, rel), fh.read())

    success = bool(validation.get("success"))
    stats = dict(validation.get("statistics") or {})
    failures = extract_failures(validation)
    uris = {
        "report_dir": root.uri(rel_dir),
        "validation": root.uri(rel_dir, "validation.json"),
        "summary": root.uri(rel_dir, "summary.json"),
        "report": root.uri(rel_dir, "report.html"),
        "data_docs": root.uri(docs_rel, "index.html"),
        "index": root.uri(REPORTS, "index.html"),
    }
    text = summary_text(table_name, stage, run_id, success, stats, summary, failures, uris["data_docs"])
    report = QualityReport(
        table_name, stage, run_id, suite.name, success, stats, failures, summary, text, rel_dir, uris
    )

    header = {"table": table_name, "stage": stage, "run_id": run_id, "suite": suite.name}
    root.write_text(
        posixpath.join(rel_dir, "validation.json"),
        json.dumps({**header, "validation": validation}, indent=1, default=str, ensure_ascii=False),
    )
    summary_doc = {
        **header,
        "covers_runs": sorted(covers_runs or []),
        "counts": dict(counts or {}),
        "origin": dict(origin or {}),
        **({"release": dict(release)} if release else {}),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "success": success,
        "statistics": stats,
        "failures": failures,
        "summary": summary,
        "uris": uris,
    }
    root.write_text(
        posixpath.join(rel_dir, "summary.json"), json.dumps(summary_doc, indent=1, default=str, ensure_ascii=False)
    )
    page = render_report(json.loads(json.dumps(summary_doc, default=str)), {"validation": validation})
    root.write_text(posixpath.join(rel_dir, "report.html"), page)
    if update_index:
        rebuild_index(root)

    if not success:
        log.warning(
            "data quality FAILED for %s (stage %s, run %s): %d expectation(s), see %s",
            table_name,
            stage,
            run_id,
            len(failures),
            uris["data_docs"],
        )
    if raise_on_failure and not success:
        raise QualityError(report)
    return report
