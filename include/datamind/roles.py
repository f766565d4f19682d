"""Column roles an analyst assigns before asking anything of a table: the one home of the rules.

Profiling decides each column's role once and stores it in ``catalog/tables`` (``column_profiles[].role``);
synthesis (both backends), the LLM prompts, the judge and the release audit read that role, never a rule
of their own. A data engineer corrects a role with the synthesis form's ``column_roles`` field
(:func:`apply_overrides`), and the correction reaches the next run.

What each role allows:

=====================  ===========================================================================
identifier             names a row or points at one (keys, codes, running numbers): counted, looked
                       up, grouped by when it has few values, never averaged, binned or correlated
additive_measure       amounts, counts, quantities: summed, averaged, compared
nonadditive_measure    rates, shares, temperatures, scores, prices per unit, averages: averaged and
                       compared, never summed or "totalled"
category               a handful of labels (booleans included): grouped by, counted (a measure is
                       never a group label, unless a 0/1 indicator or named as a class: ``labels_groups``)
date                   timestamps and calendar years: a time axis
text                   free text: looked at, never aggregated
=====================  ===========================================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

IDENTIFIER = "identifier"
ADDITIVE = "additive_measure"
NONADDITIVE = "nonadditive_measure"
CATEGORY = "category"
DATE = "date"
TEXT = "text"
ROLES = (IDENTIFIER, ADDITIVE, NONADDITIVE, CATEGORY, DATE, TEXT)
MEASURES = (ADDITIVE, NONADDITIVE)

# Words of a name (any case style: snake_case, CamelCase, "Title Case", UPPER): "EmployeeID" -> Employee, ID.
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# The last word of an identifier's name ("OrderID", "customer_id", "ZipCode", "StockNo", "Invoice Number").
_ID_LAST = {"id", "ids", "key", "code", "no", "nr", "num", "number", "nummer", "uuid", "guid", "sku", "isbn"}
_ID_WORDS = {"zip", "postal", "postcode", "phone", "fax", "iban"}
_ID_WHOLE = {"index", "unnamed: 0", "rowid", "pk"}
# Words naming a quantity that is not summed across rows (a rate, a level, a value per unit).
_NONADDITIVE_WORDS = {
    "rate", "rates", "ratio", "pct", "percent", "percentage", "share", "avg", "average", "mean", "median",
    "temperature", "temp", "temperatur", "score", "scores", "rating", "ratings", "index", "price", "prices",
    "age", "speed", "density", "humidity", "pressure", "latitude", "lat", "longitude", "lon", "lng", "margin",
    "probability", "prob", "prozent", "prozentsatz", "fraction", "proportion", "grade", "gpa", "bmi", "level",
    "elevation", "altitude",
    "height", "expectancy", "yield", "efficiency", "accuracy", "per", "wind", "windspeed", "luftfeuchtigkeit",
    "druck", "preis", "quote", "anteil", "durchschnitt", "ph", "salinity", "intensity", "ppm",
}  # fmt: skip
# Units that make a value a level or a rate: "°C", "%", "km/h", "per hour", "€/kg".
_NONADDITIVE_UNIT = re.compile(r"°|%|\bper\b|\w\s*/\s*[a-zA-Z]|\bpercent|\baverage\b|\bmean\b|\brate\b", re.I)


def words(name: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(str(name))]


def names_an_identifier(name: str) -> bool:
    """Whether a column's name marks it as a key or code, in any case style."""
    low = str(name).strip().lower()
    if low in _ID_WHOLE:
        return True
    ws = words(name)
    return bool(ws) and (ws[-1] in _ID_LAST or any(w in _ID_WORDS for w in ws))


def _nonadditive_by_name(name: str, description: str | None) -> bool:
    # the unit in brackets belongs to the name's meaning ("Wind (km/h)"); the description's units count too
    if set(words(name)) & _NONADDITIVE_WORDS:
        return True
    return bool(_NONADDITIVE_UNIT.search(str(name))) or bool(description and _NONADDITIVE_UNIT.search(description))


def _num(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def column_role(profile: Mapping, keys: Iterable[str] = ()) -> str:
    """The role of one profiled column (a ``COLUMN_PROFILE`` dict); ``keys``: the table's declared primary
    and foreign key columns."""
    name = str(profile.get("name"))
    kind = profile.get("kind") or "text"
    if name in set(keys) or kind == "id":
        return IDENTIFIER
    if kind == "datetime":
        return DATE
    if kind in ("categorical", "boolean"):
        return IDENTIFIER if names_an_identifier(name) and (profile.get("n_unique") or 0) > 50 else CATEGORY
    if kind in ("numeric", "integer"):
        if names_an_identifier(name):
            return IDENTIFIER
        lo, hi = _num(profile.get("min")), _num(profile.get("max"))
        if kind == "integer" and set(words(name)) & {"year", "jahr", "yr", "anno"}:
            return DATE  # a calendar year, whatever its range ("IndepYear" reaches back to -1523): never averaged
        if _nonadditive_by_name(name, profile.get("description")):
            return NONADDITIVE
        if kind == "numeric" and lo is not None and hi is not None and 0 <= lo and hi <= 1:
            return NONADDITIVE  # fractions: shares, probabilities, discount rates
        return ADDITIVE
    if names_an_identifier(name):
        return IDENTIFIER
    return TEXT


# Words naming a numeric column as a code of a few classes ("Pclass", "room_type", "tier", a star rating): a
# label to group by even when its role is a measure. A count or a level with few values (votes 0-3, a dB level)
# is a quantity, never a label.
_CODE_WORDS = {
    "class", "klasse", "type", "typ", "category", "kategorie", "group", "gruppe", "tier", "status", "flag",
    "segment", "cluster", "kind", "art", "code", "grade", "quarter", "quartal", "rating", "stars",
}  # fmt: skip


def names_a_code(name: str) -> bool:
    """A name whose word is, or ends in, a class word ("Pclass", "room_type", "tier")."""
    return any(w == c or (len(c) >= 4 and w.endswith(c)) for w in words(name) for c in _CODE_WORDS)


def labels_groups(name: str, role: str | None, indicator: bool = False) -> bool:
    """Whether a column of this role may label groups: any non-measure, and a measure only when it is a 0/1
    ``indicator`` or its name calls it a class or code. Grouping by a measure ("records with Libertarische
    Partij (LP) 1 have a higher average ...", a dB level as a label) treats a quantity as a category."""
    return role not in MEASURES or indicator or names_a_code(name)


def profile_labels_groups(profile: Mapping, role: str | None) -> bool:
    """``labels_groups`` from a column's profile (a 0/1 indicator: two values at most, from 0 to 1)."""
    indicator = (profile.get("n_unique") or 0) <= 2 and _num(profile.get("min")) == 0 and _num(profile.get("max")) == 1
    return labels_groups(str(profile.get("name")), role, indicator)


def with_roles(profiles: list[dict], keys: Iterable[str] = ()) -> list[dict]:
    """``profiles`` with each one's ``role`` set (what profiling stores)."""
    keys = set(keys)
    return [{**p, "role": column_role(p, keys)} for p in profiles]


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown column role {role!r}: one of {', '.join(ROLES)}")
    return role


def apply_overrides(table_name: str, roles: dict[str, str], overrides: Mapping[str, str] | None) -> dict[str, str]:
    """A data engineer's corrections: ``{"Table.Column": role}`` for one table's column, ``{"Column": role}`` for
    that column in every table. The table-qualified entry wins."""
    if not overrides:
        return roles
    out = dict(roles)
    for col in out:
        for key in (col, f"{table_name}.{col}"):
            if key in overrides:
                out[col] = check_role(overrides[key])
    return out


def table_roles(table: Mapping, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Column -> role for a ``catalog/tables`` row: the stored roles (computed the same way for rows profiled
    before roles were stored), then the corrections."""
    keys = {fk.get("from_column") for fk in table.get("foreign_keys") or []} | set(table.get("primary_key") or [])
    roles = {
        str(p.get("name")): p.get("role") or column_role(p, keys)
        for p in table.get("column_profiles") or []
        if p.get("name") is not None
    }
    return apply_overrides(str(table.get("table_name")), roles, overrides)


# The kind of unit a measure is counted in, from its name and description: two totals are only compared
# as a ratio when they share one (revenue to cost, units sold to units returned).
_UNIT_KINDS = (
    (
        "money",
        re.compile(
            r"[€$£]|\b(eur|euros?|usd|dollars?|gbp|price|revenue|sales|cost|costs|amount|income|"
            r"profit|salary|salaries|spend|budget|turnover|umsatz|gehalt|betrag|total)\b",
            re.I,
        ),
    ),
    ("count", re.compile(r"\b(count|counts|quantity|qty|units|number of|pieces|items|orders|visits|votes)\b", re.I)),
    ("duration", re.compile(r"\b(seconds?|minutes?|hours?|days?|weeks?|ms|milliseconds?|duration|time)\b", re.I)),
    ("length", re.compile(r"\b(km|kilomet(er|re)s?|meters?|metres?|miles?|distance|cm|mm|length)\b", re.I)),
    ("mass", re.compile(r"\b(kg|kilograms?|grams?|tons?|tonnes?|lbs?|pounds|weight)\b", re.I)),
)


def unit_kind(name: str, description: str | None = None) -> str | None:
    text = " ".join([" ".join(words(name)), str(name), description or ""])
    for kind, pattern in _UNIT_KINDS:
        if pattern.search(text):
            return kind
    return None


def parse_overrides(entries: Iterable[str]) -> dict[str, str]:
    """``["orders.total=additive_measure", "Pclass=category"]`` -> ``{"orders.total": "additive_measure", ...}``;
    a malformed entry or an unknown role is an error (a typo never silently keeps the old role)."""
    out: dict[str, str] = {}
    for entry in entries:
        column, sep, role = str(entry).rpartition("=")
        if not sep or not column.strip():
            raise ValueError(f"column role correction {entry!r} is not 'Table.Column=role' or 'Column=role'")
        out[column.strip()] = check_role(role.strip())
    return out
