"""What a sample's question means against what profiling learned of its table: the audit's figures for
questions built from what columns and rows mean (issue 46).

* ``aggregate_row_question``: the table holds aggregate rows (totals beside the rows they total, found at
  profiling: ``profile.semantics``) and the question does not leave them out by name, so a maximum, a mean or
  a count over it counts the totals as data.
* ``measure_category``: the question groups by, or picks a value of, a column the catalog calls a measure
  (vote counts, a dB level as a label), not a 0/1 indicator nor a column named as a class.
* ``literal_answer``: a code cell writes the final answer as a literal (``datamind.references``).
* ``fixed_answer``: the answer was known before any analysis: the question states it, the claim is settled
  by how the question was built (an outlier share "above 50 percent", the share at or below the median), or
  a count is the row count the first look at the data printed.

The catalog facts are read once per release (``load_context``): per file, each table's measures that label
no groups and its aggregate rows' labels; a few bytes a table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from datamind import references
from datamind import roles as R

_VALUE = r"(?:'[^']*'|-?\d+(?:\.\d+)?)(?![\w.%])"
# A claim the question's own construction settles, whatever the data.
_FIXED_CLAIMS = (
    # two standard deviations hold at least 75% of any values (Chebyshev): their outliers are never most records
    re.compile(r"outlier.*\b(?:more than half|over half|above 50 percent|covers? over half)", re.I | re.S),
    # records above the overall median are at most half of all records
    re.compile(r"above the overall median\b.*\b(?:more than half|over half|above 50 percent)", re.I | re.S),
)
_SHAPE = re.compile(r"\((\d+),\s*\d+\)|\b(\d+) rows\b|\((\d+) rows\)")
_HOW_MANY = re.compile(r"\bhow many\b", re.I)


@dataclass(frozen=True)
class TableFacts:
    name: str
    measures: frozenset[str] = frozenset()  # measures that label no groups (``roles.profile_labels_groups``)
    aggregate_labels: tuple[str, ...] = ()  # values naming its aggregate rows (empty: none, or unnamed)
    has_aggregates: bool = False


@dataclass
class AuditContext:
    """Per file id, what profiling learned of each of its tables."""

    files: dict[str, list[TableFacts]] = field(default_factory=dict)

    def tables_of(self, file_id: str | None, question: str) -> list[TableFacts]:
        """The tables a sample's question is about: the one its file holds, or those it names ("In the
        orders table", "the Q1 Sales sheet"), else all of the file's."""
        tables = self.files.get(file_id or "", [])
        if len(tables) <= 1:
            return tables
        named = [
            t
            for t in tables
            if re.search(rf"(?<![\w]){re.escape(t.name)}(?:\s+(?:table|sheet)\b|\.)", question, re.IGNORECASE)
        ]
        return named or tables


def facts_of(table: dict) -> TableFacts:
    """A ``catalog/tables`` row's facts."""
    keys = {fk.get("from_column") for fk in table.get("foreign_keys") or []} | set(table.get("primary_key") or [])
    roles = R.table_roles(table)
    measures = frozenset(
        str(p["name"])
        for p in table.get("column_profiles") or []
        if p.get("name") is not None
        and p.get("kind") in ("integer", "numeric")
        and str(p["name"]) not in keys
        and not R.profile_labels_groups(p, roles.get(str(p["name"])))
    )
    try:
        found = json.loads(table.get("meta_info") or "{}").get("aggregate_rows") or {}
    except (json.JSONDecodeError, AttributeError):
        found = {}
    labels = tuple(str(v) for v in found.get("labels") or []) if found.get("label_column") else ()
    return TableFacts(str(table.get("table_name")), measures, labels, bool(found))


def context_of(tables: Iterator[dict] | list[dict]) -> AuditContext:
    ctx = AuditContext()
    for t in tables:
        ctx.files.setdefault(str(t.get("file_id")), []).append(facts_of(t))
    return ctx


def load_context(root) -> AuditContext:
    """The facts of every table in a data root's catalog, read one catalog shard at a time."""
    from datamind import tables
    from datamind.assets import DIRS

    ctx = AuditContext()
    if not root.exists(DIRS["catalog_tables"]):
        return ctx
    cols = ["file_id", "table_name", "column_profiles", "meta_info", "foreign_keys", "primary_key"]
    for _, shard in tables.each(root, "catalog_tables", cols):
        for t in shard.to_pylist():
            ctx.files.setdefault(str(t.get("file_id")), []).append(facts_of(t))
    return ctx


def aggregate_row_question(question: str, tables: list[TableFacts]) -> bool:
    """A question over a table with aggregate rows that does not name them as left out."""
    for t in tables:
        if not t.has_aggregates:
            continue
        if t.aggregate_labels:
            if not all(f"'{label}'" in question or label in question for label in t.aggregate_labels):
                return True
        elif not re.search(r"\baggregate rows?\b|\btotal rows?\b", question, re.IGNORECASE):
            return True
    return False


def measure_as_category(question: str, tables: list[TableFacts]) -> list[str]:
    """The measures the question groups by or picks a value of ("which LP", "records with LP 1", "by dB")."""
    found = []
    end = r"(?=\s|[?,;:!']|\.(?!\w)|$)"  # the name ends here ("Age" is not "Age*Pclass")
    for name in sorted({m for t in tables for m in t.measures}):
        c = re.escape(name)
        patterns = (
            rf"(?<!divided )(?<!multiplied )\b(?:by|per|each|controlling for|one-hot encode)\s+{c}{end}",
            rf"\bwhich\s+{c}{end}(?!\s+(?:values?\s+)?(?:lies?|are|is)\b)",
            rf"\b(?:distinct|different)\s+{c}\s+values\b",
            rf"\bmost (?:common|frequent)\s+(?:value of\s+)?{c}{end}",
            rf"\b(?:with|have|has|where|of)\s+{c}\s+(?:equal to\s+|=\s*|is\s+)?{_VALUE}",
            rf"(?<![\w]){c}\s+group\b",
        )
        if any(re.search(p, question, re.IGNORECASE) for p in patterns):
            found.append(name)
    return found


def printed_rows(tools: list[str]) -> int | None:
    """The row count the first look at the data printed (a shape, 'N rows'), or None."""
    for obs in tools[:1]:
        m = _SHAPE.search(obs)
        if m:
            return int(next(g for g in m.groups() if g))
    return None


def fixed_answer(question: str, answer: str, tools: list[str]) -> bool:
    """An answer known before any analysis (see the module's docstring)."""
    if references.answer_in_question(question, answer):
        return True
    if any(p.search(question) for p in _FIXED_CLAIMS):
        return True
    n = printed_rows(tools)
    return n is not None and answer.strip() == str(n) and bool(_HOW_MANY.search(question))
