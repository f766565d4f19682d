"""Whether a question can be answered from what the agent sees: the one home of the grounding rules.

A question is grounded when every name it uses is a table or column the agent can print (a database's
schema, a file's header), a database question says which table it is about, and it asks only what an
analyst would compute (no average of a key, no total of a temperature; ``datamind.roles``). The LLM
synthesis path rejects a question that breaks a rule with the rule's reason code; the release audit counts
the samples that do, from the schema print inside each trajectory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from datamind import roles as R

UNGROUNDED = "ungrounded_question"
IDENTIFIER_AS_MEASURE = "identifier_as_measure"
NONADDITIVE_SUMMED = "nonadditive_summed"

# Values are quoted in questions ('Rock', "Q1 Sales"); names in backticks are names.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# What reads as a column or table name in prose: snake_case, dotted (Table.Column), CamelCase with a hump.
_NAMEISH = re.compile(
    r"(?<![\w.])(?:[A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+|[A-Z]?[a-z]+(?:[A-Z][a-z0-9]+|ID)+)(?![\w])"
)
_TABLE_LINE = re.compile(r"^Table (?P<name>.+?) \(\d+ rows\)\s*$")
_COLUMN_LINE = re.compile(r"^  - (?P<name>.+?) (?P<type>\S+)(?P<flags>( PRIMARY KEY| NOT NULL)*)\s*$")
_FK_LINE = re.compile(r"^  foreign key (?P<col>.+?) -> (?P<table>.+?)\.(?P<to>.+)$")
_CONNECT = r"(?:\s+(?:of|the|in|with|for|on|per|each|column|values?|a|an))*\s+"
_MEASURING = (
    r"mean|average|avg|median|standard deviation|std|variance|spread|sum|total|totals|bin|bins|z-scores?|"
    r"correlation|correlate|skewness|skew|quartiles?|interquartile range|regression|fit|increase in|"
    r"coefficient of variation|min-max scale|normali[sz]e|standardi[sz]e"
)
_SUMMING = r"sum|total|totals|combined total|summed|add up"


@dataclass
class Schema:
    """The tables and columns the agent can print (``tables``: table -> its columns), with the keys the
    schema declares."""

    tables: dict[str, list[str]]
    keys: set[str] = field(default_factory=set)  # "table.column" of declared primary and foreign keys
    file_name: str = ""
    roles: dict[str, str] = field(default_factory=dict)  # "table.column" -> role, where the catalog decided one

    @property
    def multi(self) -> bool:
        return len(self.tables) > 1

    def names(self) -> set[str]:
        out = {self.file_name} | set(self.tables)
        for table, cols in self.tables.items():
            out |= set(cols) | {f"{table}.{c}" for c in cols}
        return {n.casefold() for n in out if n}

    def role(self, table: str, column: str) -> str:
        if f"{table}.{column}" in self.roles:
            return self.roles[f"{table}.{column}"]
        if f"{table}.{column}" in self.keys:
            return R.IDENTIFIER
        return R.column_role({"name": column, "kind": "numeric"})


def schema_of_database(path: str, file_name: str = "") -> Schema:
    """Every table, column and declared key of a SQLite file (what ``get_db_info()`` prints of it)."""
    import sqlite3
    from urllib.parse import quote

    con = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        tables: dict[str, list[str]] = {}
        keys: set[str] = set()
        names = con.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for (name,) in names:
            quoted = '"' + name.replace('"', '""') + '"'
            cols = con.execute(f"PRAGMA table_info({quoted})").fetchall()
            tables[name] = [c[1] for c in cols]
            keys |= {f"{name}.{c[1]}" for c in cols if c[5]}
            keys |= {f"{name}.{fk[3]}" for fk in con.execute(f"PRAGMA foreign_key_list({quoted})").fetchall()}
    finally:
        con.close()
    return Schema(tables, keys, file_name)


def schema_from_db_print(text: str, file_name: str = "") -> Schema | None:
    """The schema ``get_db_info()`` printed; None when ``text`` is not such a print."""
    tables: dict[str, list[str]] = {}
    keys: set[str] = set()
    current = None
    for line in text.splitlines():
        if m := _TABLE_LINE.match(line):
            current = m.group("name")
            tables[current] = []
        elif current and (m := _COLUMN_LINE.match(line)):
            tables[current].append(m.group("name"))
            if "PRIMARY KEY" in (m.group("flags") or ""):
                keys.add(f"{current}.{m.group('name')}")
        elif current and (m := _FK_LINE.match(line)):
            keys.add(f"{current}.{m.group('col')}")
    return Schema(tables, keys, file_name) if tables else None


def _mentions(question: str, name: str) -> bool:
    return re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", question) is not None


def unknown_names(question: str, schema: Schema) -> list[str]:
    """Name-like words of the question (snake_case, Table.Column, CamelCase) that the schema does not have."""
    text = _QUOTED.sub(" ", question)
    # a known name may itself hold name-like parts ("No. of cases_max"): take the known names out first
    for name in sorted({n for cols in schema.tables.values() for n in cols} | set(schema.tables), key=len)[::-1]:
        if len(name) > 2:
            text = re.sub(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", " ", text)
    known = schema.names()
    out = []
    for token in _NAMEISH.findall(text):
        token = token.rstrip(".")
        parts = re.split(r"[_.]", token)
        if "." in token and all(len(p) <= 2 for p in parts):
            continue  # abbreviations: e.g, i.e, U.S
        if token.casefold() not in known and token not in out:
            out.append(token)
    return out


def table_unresolved(question: str, schema: Schema) -> bool:
    """A question about a database of several tables that names no table and either names no column or
    names one that several tables have (which one is meant is then a guess)."""
    if not schema.multi:
        return False
    text = _QUOTED.sub(" ", question)
    for table in schema.tables:
        if re.search(r"(?<![\w])" + re.escape(table) + r"(?:s|es)?(?![\w])", text, re.IGNORECASE):
            return False
    mentioned = {c for _, c in _columns_in(text, schema)}
    if not mentioned:
        return True
    return any(sum(c in cols for cols in schema.tables.values()) > 1 for c in mentioned)


def _measured(question: str, name: str, verbs: str) -> bool:
    pattern = rf"\b(?:{verbs})(?:{_CONNECT}|\s+)" + re.escape(name) + r"(?![\w])"
    if re.search(pattern, question, re.IGNORECASE):
        return True
    # "the correlation between Population and ID": the second operand of a pairwise statistic
    pair = r"\b(?:correlation|covariance|regression|relationship)\s+between\s+[^?.;]{1,80}?\s+and\s+"
    return verbs == _MEASURING and re.search(pair + re.escape(name) + r"(?![\w])", question, re.I) is not None


def _columns_in(question: str, schema: Schema) -> list[tuple[str, str]]:
    text = _QUOTED.sub(" ", question)
    return [(t, c) for t, cols in schema.tables.items() for c in cols if _mentions(text, c)]


def measured_identifiers(question: str, schema: Schema) -> list[str]:
    text = _QUOTED.sub(" ", question)
    found = {c for t, c in _columns_in(text, schema) if schema.role(t, c) == R.IDENTIFIER}
    return sorted(c for c in found if _measured(text, c, _MEASURING))


def summed_nonadditive(question: str, schema: Schema) -> list[str]:
    text = _QUOTED.sub(" ", question)
    found = {c for t, c in _columns_in(text, schema) if schema.role(t, c) == R.NONADDITIVE}
    return sorted(c for c in found if _measured(text, c, _SUMMING))


def check_question(question: str, schema: Schema) -> tuple[str, str] | None:
    """(reason code, reason) of the first rule ``question`` breaks, or None when it is grounded."""
    missing = unknown_names(question, schema)
    if missing:
        return UNGROUNDED, f"names {', '.join(repr(m) for m in missing[:3])}, which the data does not have"
    if schema.multi and table_unresolved(question, schema):
        return UNGROUNDED, f"does not say which of the {len(schema.tables)} tables it is about"
    if schema.multi:
        text = _QUOTED.sub(" ", question)
        named = [t for t in schema.tables if re.search(r"(?<![\w])" + re.escape(t) + r"(?![\w.])", text)]
        mentioned = {c for _, c in _columns_in(text, schema)}
        if len(named) == 1 and mentioned and not mentioned & set(schema.tables[named[0]]):
            return UNGROUNDED, f"asks about {sorted(mentioned)[0]!r}, which the {named[0]} table does not have"
    keys = measured_identifiers(question, schema)
    if keys:
        return IDENTIFIER_AS_MEASURE, f"computes a statistic of the identifier {keys[0]!r}"
    rates = summed_nonadditive(question, schema)
    if rates:
        return NONADDITIVE_SUMMED, f"adds up {rates[0]!r}, a rate or level whose sum means nothing"
    return None
