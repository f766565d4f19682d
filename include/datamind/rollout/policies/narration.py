"""What the offline expert says in its ``<think>`` blocks, built from what the trajectory has seen.

Every sentence refers to something concrete from an earlier observation (column names and types the
first read printed, the problem a read showed, the error a cell raised, the value the previous hop
printed) and states what the next step does.  Wording is chosen deterministically from a seed (the
trajectory's identity), from several phrasings per situation, so a dataset does not teach one
template sentence.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass


def pick(options: list[str] | tuple[str, ...], seed: str, salt: str) -> str:
    digest = hashlib.sha256(f"{seed}|{salt}".encode()).digest()
    return options[int.from_bytes(digest[:4], "big") % len(options)]


def chance(seed: str, salt: str, rate: float) -> bool:
    digest = hashlib.sha256(f"{seed}|{salt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < rate


def short(text: str, limit: int = 120) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters ("..." marks a cut; a
    single word longer than the limit is cut inside)."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    if text[limit - 3] != " " and " " in cut:  # the cut fell inside a word: end at the word before
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "..."


def opening(text: str, limit: int = 120) -> str:
    """The first sentence of ``text`` (whole when it is the only one), shortened like ``short``: what a
    multi-step question asks first, quoted without the steps that build on it."""
    text = " ".join((text or "").split())
    m = _SENTENCE.match(text)
    return short(m.group(0) if m else text, limit)


# A sentence ends at . ? or ! before a capital letter, unless the dot closes an abbreviation ("e.g. Sales").
_SENTENCE = re.compile(r".+?(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\betc)(?<!\bno)(?<!\bapprox)[.?!](?=\s+[A-Z])")


# -- what a read printed -----------------------------------------------------------------------
_DTYPE_LINE = re.compile(r"^(?P<name>\S(?:.*\S)?)\s{2,}(?P<dtype>[A-Za-z][\w\[\], ]*)$")


@dataclass(frozen=True)
class ReadView:
    """The columns and shape a ``df.dtypes`` / ``df.shape`` print showed."""

    shape: tuple[int, int] | None
    columns: tuple[tuple[str, str], ...]  # (name, dtype)
    error: str | None  # the exception line when the read failed

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.columns]


def read_view(output: str) -> ReadView:
    error = None
    for line in output.splitlines():
        # "KeyError: 'x'", and qualified names such as "_duckdb.BinderException: Binder Error: ..." (shown
        # by their last part: the module is the library's internals)
        m = re.match(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)):\s*(.*)$", line.strip())
        if m:
            error = f"{m.group(1)}: {short(m.group(2), 160)}"
    shape = None
    m = re.search(r"shape:\s*\((\d+),\s*(\d+)\)", output)
    if m:
        shape = (int(m.group(1)), int(m.group(2)))
    cols: list[tuple[str, str]] = []
    if shape:
        lines = output.split(m.group(0), 1)[1].splitlines()[1:]
        for line in lines[: shape[1]]:
            d = _DTYPE_LINE.match(line.rstrip())
            if not d:
                break
            cols.append((d.group("name"), d.group("dtype")))
    return ReadView(shape, tuple(cols), error)


def placeholder_headers(names) -> list[str]:
    """'Unnamed: n' columns that show a header problem. A lone leading 'Unnamed: 0' is the row index a
    DataFrame was saved with: a normal column of such files, not a sign that the header is elsewhere."""
    unnamed = [n for n in names if str(n).startswith("Unnamed:")]
    return [] if unnamed == ["Unnamed: 0"] and str(names[0]) == "Unnamed: 0" else unnamed


def read_problem(view: ReadView) -> str | None:
    """What an analyst would notice in a first read, quoted from it; None when it looks usable."""
    if view.error:
        if "UnicodeDecodeError" in view.error:
            return f"the read failed with {short(view.error, 90)}: the file is not UTF-8 text"
        return f"the read failed with {short(view.error, 110)}"
    names = view.names
    if not names:
        return None
    unnamed = placeholder_headers(names)
    if len(names) == 1 and any(sep in names[0] for sep in (";", "\t", "|")):
        sep = next(s for s in (";", "\t", "|") if s in names[0])
        shown = {";": "semicolons", "\t": "tabs", "|": "pipes"}[sep]
        return f"everything landed in one column named {short(names[0], 60)!r}: the fields are separated by {shown}"
    if unnamed and names[-len(unnamed) :] == unnamed and len(unnamed) * 2 < len(names):
        cols = " and ".join(repr(n) for n in unnamed[:2])
        return (
            f"the last column{'s' if len(unnamed) > 1 else ''} {cols} "
            f"{'have' if len(unnamed) > 1 else 'has'} no name: the lines end with a delimiter, "
            "which leaves an empty column behind"
        )
    if unnamed and len(unnamed) * 2 >= len(names):
        first = short(names[0], 70)
        return (
            f"{len(unnamed)} of {len(names)} columns came out as 'Unnamed: n' and the first is called {first!r}, "
            "so the top rows are a title, not the header"
        )
    if unnamed:
        return f"columns such as {unnamed[0]!r} have no name, so the header row is not the first line"
    return None


def describe_fix(code: str) -> str:
    """How a corrected read differs from a default one, in words (from the code's own arguments)."""
    parts = []
    m = re.search(r"\bsep=(['\"])(.+?)\1", code)
    if m and m.group(2) != ",":  # the default needs no mention: it is not what changed
        parts.append(f"separator {m.group(2)!r}")
    m = re.search(r"\bdecimal=(['\"])(.)\1", code)
    if m and m.group(2) != ".":
        parts.append(f"decimal mark {m.group(2)!r}")
    m = re.search(r"\bencoding=(['\"])(.+?)\1", code)
    if m and m.group(2).lower().replace("-", "") not in ("utf8",):
        parts.append(f"encoding {m.group(2)}")
    m = re.search(r"\bskiprows=(\d+)|\bheader=(\d+)", code)
    if m:
        parts.append(f"the header on line {int(m.group(1) or m.group(2)) + 1}")
    m = re.search(r"raw\.iloc\[(\d+)\]", code)
    if m:
        parts.append(f"the header taken from sheet row {int(m.group(1)) + 1}")
    m = re.search(r"raw\.iloc\[(\d+):(\d+)\]", code)
    if m:
        parts.append(f"header rows {int(m.group(1)) + 1}-{int(m.group(2))} joined into one name per column")
    if "notes under the table" in code:
        parts.append("the note rows under the table dropped")
    if "isna().all()" in code and "read_" not in code:
        return "the empty unnamed columns dropped"
    if "startswith('Unnamed: ')" in code:
        parts.append("the empty unnamed columns dropped")
    if "str.strip()" in code:
        parts.append("text cells stripped")
    return ", ".join(parts) or "explicit reading options"


# -- what a program uses ------------------------------------------------------------------------
def columns_used(program: str, known: list[str]) -> list[str]:
    """Known column names that a program mentions as string literals or quoted SQL identifiers."""
    found: list[str] = []
    literals: list[str] = []
    try:
        for node in ast.walk(ast.parse(program)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.append(node.value)
    except SyntaxError:
        literals.append(program)
    # the joined relation's CTE names every column of the join; the statement after it is what the step uses
    literals = [re.sub(r"^WITH r AS \(.*?\n\)\n", "", lit, flags=re.DOTALL) for lit in literals]
    text = "\n".join(literals)
    for name in known:
        if name in found:
            continue
        if (
            name in literals
            or re.search(r'"' + re.escape(name) + r'"', text)
            or re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w.])", text)
        ):
            found.append(name)
    return found


def name_list(names: list[str], limit: int = 3) -> str:
    shown = [f"`{n}`" for n in names[:limit]]
    if len(names) > limit:
        shown.append(f"{len(names) - limit} more")
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " and " + shown[-1]


FORMULATION = {
    "pandas": (
        "work on the DataFrame with pandas",
        "compute it with pandas operations on `df`",
        "do it in pandas directly",
        "use pandas indexing and aggregation",
    ),
    "duckdb-sql": (
        "write it as one SQL query that DuckDB runs over `df`",
        "let DuckDB evaluate a SQL query on the frame",
        "express it in SQL and run it on the DataFrame with DuckDB",
    ),
    "sqlite-sql": (
        "load the frame into an in-memory SQLite table and query it",
        "copy `df` into SQLite and answer with a SQL statement",
    ),
    "sql-tool": (
        "query the database through `execute_sql`",
        "run a SQL statement with the `execute_sql` tool",
        "ask the database directly with `execute_sql`",
    ),
    "sql-tool+pandas": (
        "pull the rows with `execute_sql` and finish in pandas",
        "fetch the relation with `execute_sql`, then compute in pandas",
    ),
    "numpy": ("use numpy on the column values", "compute it with numpy arrays"),
    "polars": (
        "run the SQL through a polars SQLContext over an Arrow copy of `df`",
        "let polars evaluate the query on the frame",
        "hand the frame to polars and query it in SQL",
    ),
    "stdlib": ("use the standard library on the values",),
    # steps that only compare or rescale an earlier result: no data is read, and the words must not claim any
    "arithmetic": (
        "compare the numbers directly in Python",
        "settle it with a one-line comparison",
        "check it with plain Python arithmetic",
    ),
    "sql-constant": (
        "let SQLite evaluate the comparison in a SELECT without a table",
        "check the comparison with a one-line SELECT",
    ),
}


# -- why a step joins -----------------------------------------------------------------------------
_Q = r'"((?:[^"]|"")+)"'
_FROM_T = re.compile(r"\bFROM\s+" + _Q + r"\s+AS\s+t\b", re.IGNORECASE)
_LEFT_JOIN = re.compile(r"\bJOIN\s+" + _Q + r"\s+AS\s+(p\d+)\s+ON\s+t\." + _Q + r"\s*=\s*p\d+\." + _Q, re.IGNORECASE)


def join_reasons(program: str, seed: str, salt: str) -> list[str]:
    """For each parent table a step joins, the sentence that says why: which of the question's columns lives
    there and which foreign key leads to it (all read from the schema the first step printed)."""
    table = _FROM_T.search(program)
    if not table:
        return []
    child = table.group(1).replace('""', '"')
    out = []
    for parent, alias, fk, pk in _LEFT_JOIN.findall(program):
        parent, fk, pk = (x.replace('""', '"') for x in (parent, fk, pk))
        label = re.search(rf"\b{alias}\.{_Q}\s+AS\s+{_Q}", program)
        column = label.group(2).replace('""', '"') if label else f"{parent}'s columns"
        out.append(
            pick(
                (
                    f"{column} is not in {child}; {child}.{fk} is a foreign key to {parent}.{pk}, so I join "
                    f"{parent} on it",
                    f"the schema shows {child}.{fk} -> {parent}.{pk}, which is how each {child} row reaches "
                    f"{column}, so the query joins {parent} on that key",
                    f"{column} lives in {parent}, and {child} points to it through the foreign key {fk} "
                    f"(-> {parent}.{pk}): a LEFT JOIN on it brings the column in",
                ),
                seed,
                f"{salt}-join-{parent}",
            )
        )
    return out
