"""Which columns can carry which kind of question.

Kinds come from the catalog's column profiles when present and agree with the loaded frame; otherwise
they are inferred here. Each column's analyst role (``datamind.roles``) comes from the catalog too, so a
key is never a measure and a rate is never summed. What the generators read:
measures (numeric, not identifiers, enough distinct values; ``additive`` the ones a sum means something
for), groups (few distinct labels, each seen more than once), dates (parseable timestamps or a year-like
integer column).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from datamind import roles as R
from datamind.roles import names_an_identifier

_YEAR_NAME = re.compile(r"(^|[_\s])(year|yr|jahr)($|[_\s])|^year|^jahr", re.I)
MAX_GROUPS = 30
MAX_INTEGER_GROUPS = 10
# The last word of a column name, in plural: an integer column named so counts things ("Stores", "units",
# "days"); "class", "status" and "series" are not plurals.
_PLURAL_LAST_WORD = re.compile(r"[A-Za-z]*[^sui\W_]s$|[A-Za-z]*ies$")


@dataclass
class Column:
    name: str
    kind: str  # numeric | integer | datetime | boolean | categorical | text | id
    n_unique: int
    n_null: int


@dataclass
class TableView:
    """A loaded table with column roles; what every generator reads."""

    df: pd.DataFrame
    columns: dict[str, Column]
    measures: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    year_columns: list[str] = field(default_factory=list)  # integer columns holding calendar years
    roles: dict[str, str] = field(default_factory=dict)  # column -> datamind.roles role
    units: dict[str, str] = field(default_factory=dict)  # measure -> the kind of unit it is counted in

    @property
    def n_rows(self) -> int:
        return len(self.df)

    @property
    def additive(self) -> list[str]:
        """Measures whose sum means something (amounts, counts): the only ones a question totals."""
        return [m for m in self.measures if self.roles.get(m, R.ADDITIVE) == R.ADDITIVE]

    def same_unit(self, a: str, b: str) -> bool:
        """Whether two measures are counted in the same kind of unit (a ratio of their totals then reads as
        something: revenue to cost, units sold to units returned)."""
        return a in self.units and self.units.get(a) == self.units.get(b)

    _counts: dict = field(default_factory=dict, repr=False)

    def group_values(self, col: str, min_count: int = 2, limit: int = 6) -> list:
        """Most frequent values of a group column, ties broken by value, each seen >= min_count times."""
        counts = self._counts.get(col)
        if counts is None:
            counts = self._counts[col] = self.df[col].dropna().value_counts()
        items = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
        return [python_scalar(v) for v, c in items if c >= min_count][:limit]


def _names_a_count(name: str) -> bool:
    """Whether a column's name ends in a plural noun ("Stores", "n_units", "NumberOfDays"): its integers count
    something, and grouping by a count ("the Stores with the highest average revenue") reads as nonsense."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)
    return bool(words) and _PLURAL_LAST_WORD.fullmatch(words[-1]) is not None and len(words[-1]) > 3


def python_scalar(value):
    """numpy/pandas scalar -> plain Python (so repr() gives a clean literal)."""
    if hasattr(value, "item"):
        value = value.item()
    return value


def infer_kind(s: pd.Series, name: str) -> str:
    non_null = s.dropna()
    n_unique = int(non_null.nunique())
    if pd.api.types.is_bool_dtype(s):
        return "boolean"
    if pd.api.types.is_datetime64_any_dtype(s):
        return "datetime"
    if pd.api.types.is_numeric_dtype(s):
        integral = pd.api.types.is_integer_dtype(s) or (len(non_null) and (non_null % 1 == 0).all())
        if integral and names_an_identifier(name):
            return "id"
        if integral and len(non_null) > 20 and n_unique == len(non_null) and non_null.is_monotonic_increasing:
            return "id"
        return "integer" if integral else "numeric"
    if len(non_null) == 0:
        return "text"
    if _looks_like_dates(non_null):
        return "datetime"
    if names_an_identifier(name) and n_unique > 0.9 * len(non_null):
        return "id"
    if n_unique <= max(MAX_GROUPS, 0.05 * len(non_null)) or n_unique <= 0.5 * len(non_null):
        return "categorical"
    return "text"


def _looks_like_dates(values: pd.Series) -> bool:
    sample = values.astype(str).head(200)
    if not sample.str.contains(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}", regex=True).mean() > 0.9:
        return False
    parsed = pd.to_datetime(sample, errors="coerce", format="mixed")
    return parsed.notna().mean() > 0.9


def _parses_as_dates(values: pd.Series) -> bool:
    sample = values.astype(str).head(200)
    return len(sample) > 0 and pd.to_datetime(sample, errors="coerce", format="mixed").notna().mean() > 0.9


def _kind_agrees(kind: str, s: pd.Series) -> bool:
    numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
    if kind in ("numeric", "integer"):
        return numeric
    if kind == "datetime":
        return pd.api.types.is_datetime64_any_dtype(s) or (not numeric and _parses_as_dates(s.dropna()))
    return True


def groups_by_value(name: str, values: pd.Series, role: str | None) -> bool:
    """Whether a column whose role is ``role`` may label groups (``datamind.roles.labels_groups``), its values
    telling whether it is a 0/1 indicator."""
    present = values.dropna()
    indicator = len(present) > 0 and bool(present.isin([0, 1]).all()) if role in R.MEASURES else False
    return R.labels_groups(name, role, indicator)


def ambiguous_labels(df: pd.DataFrame, labels: Mapping[str, str]) -> list[str]:
    """The joined parent labels (``Parent.Column`` -> the foreign key it is reached through) that name more than
    one key value: two playlists named "Music" (ids 1 and 8) are two groups, and grouping by the name merges
    them."""
    out = []
    for alias, fk in labels.items():
        if alias in df.columns and fk in df.columns:
            pairs = df[[alias, fk]].dropna().drop_duplicates()
            if pairs[alias].duplicated().any():
                out.append(alias)
    return out


def build_view(
    df: pd.DataFrame,
    profiles: list[dict] | None = None,
    keys: set[str] | frozenset = frozenset(),
    roles: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> TableView:
    """Column uses of ``df``; ``keys`` are key columns (e.g. foreign keys), never measures or groups;
    ``roles``: the catalog's column roles (``datamind.roles.table_roles``), decided from the profile
    where absent; ``labels``: joined parent label columns and the foreign key each is reached through (a
    label that names two keys is no group: the key groups instead)."""
    by_name = {str(p.get("name")): p for p in (profiles or []) if p.get("name") is not None}
    roles = dict(roles or {})
    columns: dict[str, Column] = {}
    for name in df.columns:
        s = df[name]
        prof = by_name.get(str(name))
        kind = prof.get("kind") if prof else None
        if not kind or not _kind_agrees(kind, s):
            kind = infer_kind(s, str(name))
        columns[str(name)] = Column(str(name), kind, int(s.nunique(dropna=True)), int(s.isna().sum()))
        if str(name) not in roles:
            profile = dict(prof or {}, name=str(name), kind=kind, n_unique=columns[str(name)].n_unique)
            if kind in ("numeric", "integer") and s.notna().any() and pd.api.types.is_numeric_dtype(s):
                profile.setdefault("min", s.min())
                profile.setdefault("max", s.max())
            roles[str(name)] = R.column_role(profile, keys)

    view = TableView(df=df, columns=columns, roles=roles)
    view.units = {
        str(p["name"]): unit for p in by_name.values() if (unit := R.unit_kind(str(p["name"]), p.get("description")))
    }
    n = len(df)
    ambiguous = set(ambiguous_labels(df, labels or {}))
    by_key = {fk for alias, fk in (labels or {}).items() if alias in ambiguous}
    for name, col in columns.items():
        if name in by_key:  # the key of a parent whose label names several keys groups in the label's place
            if 2 <= col.n_unique <= min(MAX_GROUPS, max(2, n // 2)) and (df[name].value_counts() >= 2).sum() >= 2:
                view.groups.append(name)
            continue
        if name in keys or names_an_identifier(name) and col.kind in ("integer", "id") or name in ambiguous:
            continue
        s = df[name]
        numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
        measurable = roles.get(name) in R.MEASURES
        if measurable and col.kind in ("numeric", "integer") and numeric and col.n_unique >= 5 and s.notna().sum() >= 5:
            view.measures.append(name)
        # Integers group only when they are codes with a handful of levels (class, rating), not counts.
        max_groups = MAX_INTEGER_GROUPS if col.kind == "integer" else MAX_GROUPS
        counts_things = col.kind == "integer" and _names_a_count(name)
        if (
            col.kind in ("categorical", "boolean", "integer", "text")
            and not counts_things
            and 2 <= col.n_unique <= min(max_groups, max(2, n // 2))
            and groups_by_value(name, s, roles.get(name))
        ):
            counts = s.dropna().value_counts()
            if (counts >= 2).sum() >= 2:
                view.groups.append(name)
        if col.kind == "datetime":
            view.dates.append(name)
        elif col.kind == "integer" and _YEAR_NAME.search(name) and numeric:
            vals = s.dropna()
            if len(vals) and vals.between(1800, 2100).all() and col.n_unique >= 2:
                view.year_columns.append(name)
    # A year column is a time axis, not a quantity to average.
    view.measures = [m for m in view.measures if m not in view.year_columns]
    return view
