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
import math
import re
from dataclasses import dataclass

from datamind.agent.policies import cells


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
# (a name may start with spaces: `' Sales'` prints as such, and every column after it must still be read)
_DTYPE_LINE = re.compile(r"^(?P<name>\s*\S(?:.*\S)?)\s{2,}(?P<dtype>[A-Za-z][\w\[\], ]*)$")


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
    m = re.search(r"\bthousands=(['\"])(.)\1", code)
    if m:
        parts.append(f"thousands separator {m.group(2)!r}")
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
    if "keep_default_na=False" in code:
        parts.append("only empty cells as missing (a label such as 'None' stays a label)")
    if "' '.join(str(v).split())" in code or "str(c).strip() for c in df.columns" in code:
        parts.append("the column names trimmed")
    if "str.strip()" in code:
        parts.append("text cells stripped")
    return ", ".join(parts) or "explicit reading options"


def layout_problem(view: ReadView, output: str, fixed_read: str, columns: list[str]) -> str | None:
    """What a clean-looking first read still gets wrong about the ``columns`` a task needs, where the corrected
    read ``fixed_read`` changes it, quoted from the print: numbers written with thousands separators came out as
    text ("5,350,380"), or a header carries spaces around its name (`' Sales'`, which `df['Sales']` misses)."""
    sep = re.search(r"\bthousands=(['\"])(.)\1", fixed_read)
    dtypes = dict(view.columns)
    if sep:
        shown = re.search(rf"(?<![\w.])\d{{1,3}}(?:{re.escape(sep.group(2))}\d{{3}})+(?!\w)", output)
        texts = [c for c in columns if c in dtypes and is_text_dtype(dtypes[c])]
        if shown and not texts:  # the task's columns came out right; the column printing that number did not
            texts = [c for c in dtypes if is_text_dtype(dtypes[c]) and _prints_in_column(output, c, shown.group(0))]
        if shown and texts:
            return (
                f"`{texts[0]}` came out as text: its numbers are written with thousands separators, as in "
                f"{shown.group(0)}, which a default read does not parse"
            )
    trims = "' '.join(str(v).split())" in fixed_read or "str(c).strip() for c in df.columns" in fixed_read
    if trims:
        for c in columns:
            spaced = next((n for n in dtypes if n != c and n.strip() == c), None)
            if spaced is not None:
                return f"the header {spaced!r} carries spaces around its name, so `df[{c!r}]` would not find it"
        spaced = next((n for n in dtypes if n != n.strip()), None)
        if spaced is not None:  # not a column of this task, yet a name no one can type as it reads
            return f"the header {spaced!r} carries spaces around its name"
    return None


def _prints_in_column(output: str, column: str, value: str) -> bool:
    """Whether a ``df.head()`` print shows ``value`` under ``column`` (its header line, then rows whose text
    under that header's span holds the value)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        at = line.find(column)
        if at < 0 or i + 1 >= len(lines) or not re.match(r"\s*0\s", lines[i + 1]):
            continue
        end = at + len(column)
        for row in lines[i + 1 : i + 4]:
            if value in row[max(0, at - 15) : end + 2]:
                return True
    return False


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


def join_reasons(program: str, seed: str, salt: str, again: bool = False) -> list[str]:
    """For each parent table a step joins, the sentence that says why: which of the question's columns lives
    there and which foreign key leads to it (all read from the schema the first step printed); ``again``: the
    short form for a join an earlier step already explained."""
    table = _FROM_T.search(program)
    if not table:
        return []
    child = table.group(1).replace('""', '"')
    out = []
    for parent, alias, fk, pk in _LEFT_JOIN.findall(program):
        parent, fk, pk = (x.replace('""', '"') for x in (parent, fk, pk))
        label = re.search(rf"\b{alias}\.{_Q}\s+AS\s+{_Q}", program)
        column = label.group(2).replace('""', '"') if label else f"{parent}'s columns"
        if again:
            out.append(f"{column} comes in through the same join, {child}.{fk} -> {parent}.{pk}")
            continue
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


# -- what the session has seen ----------------------------------------------------------------------------
_MISSING_LINE = re.compile(r"^missing values: (\{.*\})\s*$", re.MULTILINE)


def missing_counts(output: str) -> dict[str, int] | None:
    """The per-column missing counts the first look printed (only columns with gaps), or None if not printed."""
    m = _MISSING_LINE.search(output or "")
    if not m:
        return None
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else None


@dataclass(frozen=True)
class DbTable:
    name: str
    rows: int
    columns: tuple[tuple[str, str], ...]  # (name, declared type)
    keys: tuple[tuple[str, str, str], ...]  # (column, parent table, parent column)


def db_tables(schema: str) -> dict[str, DbTable]:
    """The tables a ``get_db_info()`` print lists, with row counts, column types and foreign keys."""
    out: dict[str, DbTable] = {}
    for block in re.split(r"\n(?=Table )", schema or ""):
        head = re.match(r"Table (.+?) \((\d+) rows?\)", block)
        if not head:
            continue
        cols = tuple(
            (m.group(1), m.group(2))
            for m in re.finditer(r"^\s+- (.+?) ([A-Z][A-Z0-9_ ()]*?)(?: PRIMARY KEY| NOT NULL)*$", block, re.M)
        )
        keys = tuple(
            (m.group(1), m.group(2), m.group(3))
            for m in re.finditer(r"^\s+foreign key (.+?) -> (.+?)\.(.+)$", block, re.M)
        )
        out[head.group(1)] = DbTable(head.group(1), int(head.group(2)), cols, keys)
    return out


def is_numeric_dtype(dtype: str) -> bool:
    d = dtype.lower()
    return d.startswith(("int", "float", "uint")) or d in ("integer", "real", "numeric", "double", "float", "bigint")


def is_text_dtype(dtype: str) -> bool:
    d = dtype.lower()
    return d in ("object", "str", "string", "text") or d.startswith(("varchar", "char", "string"))


def kind_word(dtype: str) -> str:
    d = dtype.lower()
    if d.startswith(("int", "uint")) or d in ("integer", "bigint"):
        return "integer"
    if d.startswith("float") or d in ("real", "double", "numeric", "float"):
        return "float"
    if d.startswith("datetime") or d in ("date", "datetime"):
        return "datetime"
    if d == "bool" or d == "boolean":
        return "boolean"
    return "text"


# -- describing a step in the analyst's words --------------------------------------------------------------
_BUILDS_ON = re.compile(r"\s*Builds on the previous question:.*$", re.DOTALL)

# The synthesizer describes each step in its own fixed wording (``Mean of the numeric column X, ignoring missing
# values.``); a thought that pasted it would teach that wording. Each description reads here as what an analyst
# plans, in other words: a verb phrase over the columns (in backticks) and the earlier value ({P}: the variable
# holding it, or "that value"), two phrasings each. A description not listed gives no plan (the thought then says
# how the step computes instead), never the description itself.
_PLANS: tuple[tuple[str, tuple[str, str]], ...] = (
    (r"Mode of {g}", ("find which `{g}` occurs most often", "count rows per `{g}` and keep the top one")),
    (
        r"Mode of {g} with its frequency, as 'value, count'",
        ("find the most frequent `{g}` and how many rows carry it", "count rows per `{g}` and report the leader"),
    ),
    (r"Group by {g}, rank by mean {m}", ("average `{m}` per `{g}` and keep the highest", "rank `{g}` by mean `{m}`")),
    (
        r"Group by {g}, average {m}, report the group with the largest mean",
        ("average `{m}` per `{g}` and keep the highest", "rank `{g}` by mean `{m}`"),
    ),
    (r"Mean of {m}", ("average `{m}` over the table", "take the overall mean of `{m}`")),
    (
        r"Mean of the numeric column {m}, ignoring missing values",
        ("average `{m}` over the rows that have a value", "take the mean of `{m}`, blanks aside"),
    ),
    (r"(?:Median of|50th percentile of) {m}", ("take the middle value of `{m}`", "find the median `{m}`")),
    (
        r"(?:Sample standard deviation of|Standard deviation of) {m}(?: with n-1 in the denominator)?",
        ("measure how widely `{m}` varies (sample std)", "get the spread of `{m}` as a standard deviation"),
    ),
    (r"Spread of the middle half of {m}", ("take the interquartile range of `{m}`", "measure Q3 - Q1 of `{m}`")),
    (
        r"Average {m} inside the {g} group found by the previous step",
        ("average `{m}` over the rows whose `{g}` is {P}", "take mean `{m}` where `{g}` equals {P}"),
    ),
    (
        r"Restrict to the previous step's {g} group, then take the mode of {g2}",
        ("keep the rows with `{g}` = {P} and find their commonest `{g2}`", "look at `{g2}` within {P} only"),
    ),
    (
        r"Count the rows of the {g} group found by the previous step",
        ("count the rows whose `{g}` is {P}", "see how many records carry {P} in `{g}`"),
    ),
    (
        r"Describe the previous step's {g} group by the number of distinct {g2} values",
        ("count the different `{g2}` values within {P}", "see how many `{g2}` values occur where `{g}` is {P}"),
    ),
    (
        r"Sample standard deviation of {m} inside the previous step's {g} group",
        ("measure the spread of `{m}` within {P}", "get the std of `{m}` for the rows whose `{g}` is {P}"),
    ),
    (
        r"Difference in mean {m} between the previous step's {g} group and the rest",
        ("set mean `{m}` for {P} against every other row", "see how far {P} sits from the rest on mean `{m}`"),
    ),
    (
        r"Deduplicate, drop missing {m}, then take the median {m} inside the previous step's {g} group",
        (
            "clean out duplicates and blank `{m}`, then find the middle value for {P}",
            "median `{m}` for {P} on clean rows",
        ),
    ),
    (
        r"Build a binary feature from {m} and count it inside the previous step's {g} group",
        ("flag rows by `{m}` and count the flags within {P}", "turn `{m}` into a 0/1 flag and total it for {P}"),
    ),
    (
        r"Pearson correlation of {x} and {y} inside the previous step's {g} group",
        ("correlate `{x}` with `{y}` within {P}", "see whether `{x}` and `{y}` move together for {P}"),
    ),
    (
        r"Stratify by the previous step's {g} group, contrast mean {m} above vs at-or-below the median {x}",
        ("within {P}, split at the median `{x}` and compare mean `{m}`", "compare `{m}` for high and low `{x}` in {P}"),
    ),
    (
        r"Date span of {d} inside the previous step's {g} group",
        ("measure how many days `{d}` covers for {P}", "take first and last `{d}` of {P} and count the days"),
    ),
    (
        r"Use the previous result as a threshold on {m}",
        ("count the rows whose `{m}` is above {P}", "see how many `{m}` values exceed {P}"),
    ),
    (
        r"Filter {m} by the previous result, then take the mode of {g}",
        ("keep rows with `{m}` over {P} and find their commonest `{g}`", "see which `{g}` leads once `{m}` > {P}"),
    ),
    (
        r"Compare the previous result with the median of {m}",
        ("subtract the median `{m}` from {P}", "see how far {P} sits from the median `{m}`"),
    ),
    (
        r"Check a claim about the previous result against the median of {m}",
        ("set {P} against the median `{m}`", "check {P} against the middle value of `{m}`"),
    ),
    (
        r"Percentile rank of the previous result within {m}",
        ("see where {P} falls among the `{m}` values", "work out the percentile rank of {P} in `{m}`"),
    ),
    (
        r"Ratio of the maximum {m} to the previous result",
        ("divide the largest `{m}` by {P}", "see how many times {P} fits into the top `{m}`"),
    ),
    (
        r"Count records beyond mean \+/- 2 x the previous spread of {m}",
        ("count `{m}` values more than two {P} from the mean", "flag `{m}` values outside mean +/- 2 * {P}"),
    ),
    (
        r"Coefficient of variation of {m} from the previous spread",
        ("divide {P} by the mean `{m}`", "relate {P} to the average `{m}` (coefficient of variation)"),
    ),
    (
        r"Divide the previous count by the number of records",
        ("turn {P} into a share of all rows", "see what fraction of the table {P} is"),
    ),
    (
        r"Compare the previous count with half the table",
        ("check {P} against half the rows", "see if {P} is a majority"),
    ),
    (
        r"Scale the previous difference by the mean of {m}",
        ("express {P} as a percentage of the mean `{m}`", "put {P} on the scale of the average `{m}`"),
    ),
    (r"Check a claim about the previous result", ("settle the claim with {P}", "test the statement against {P}")),
    (
        r"Sum of {m} restricted to one {g} group",
        ("total `{m}` for that one `{g}`", "add up `{m}` over the rows of that `{g}`"),
    ),
    (r"Maximum of {m} within one {g} group", ("take the largest `{m}` in that `{g}`", "find the top `{m}` there")),
    (
        r"Sum {m} per {g} and return the top three group labels in descending order",
        ("add up `{m}` for each `{g}` and list the biggest three", "rank `{g}` by summed `{m}` and keep three"),
    ),
    (
        r"Find the single record with the largest {m} and report its {lab}",
        ("find the row with the top `{m}` and read its `{lab}`", "sort by `{m}` and take the first `{lab}`"),
    ),
    (r"Filter on {g} and count the matching rows", ("count the rows with that `{g}`", "filter `{g}` and count")),
    (
        r"Compute the mean of {m}, then count rows strictly above it",
        ("count the rows whose `{m}` beats its own mean", "compare each `{m}` with the average and count the higher"),
    ),
    (
        r"Number of unique non-missing values of {g}",
        ("count the different `{g}` values", "see how many distinct `{g}` there are"),
    ),
    (
        r"Mean {m} for two {g} groups, subtracted",
        ("subtract one `{g}`'s mean `{m}` from the other's", "set the two `{g}` groups' average `{m}` side by side"),
    ),
    (
        r"Median {m} of each of the two {g} groups; name the larger",
        (
            "set the middle `{m}` value of one `{g}` against the other",
            "take median `{m}` per `{g}` and keep the higher",
        ),
    ),
    (r"sum\({a}\) / sum\({b}\)", ("divide total `{a}` by total `{b}`", "relate the sums of `{a}` and `{b}`")),
    (r"max\({m}\) - min\({m}\)", ("take the range of `{m}`", "subtract the smallest `{m}` from the largest")),
    (r"Add the {m} sums of two {g} groups", ("add up `{m}` over both `{g}` groups", "sum `{m}` for the two groups")),
    (
        r"Basic summary of {m}; mean rounded to 4 decimals",
        ("summarise `{m}`: lowest, highest, average", "get min, max and mean of `{m}`"),
    ),
    (
        r"Structure overview: shape and the column with the most gaps, placeholder text included",
        ("count rows and columns and find the gappiest column", "size the table and see where blanks pile up"),
    ),
    (
        r"Verify a claim by comparing two group means of {m}",
        ("compare the two groups' average `{m}`", "check the claim on mean `{m}` per group"),
    ),
    (
        r"Locate the maximum of {m} and check the claimed {g}",
        ("find the row with the top `{m}` and read its `{g}`", "see whose `{m}` is largest"),
    ),
    (
        r"Share of {m} \(a non-negative quantity\) attributable to one {g} group, in percent",
        ("work out what percent of all `{m}` that `{g}` holds", "divide that `{g}`'s `{m}` by the grand total"),
    ),
    (
        r"Sort by {d}, take the percentage change of {m} between consecutive records, and average it",
        ("order by `{d}` and average the step-to-step change in `{m}`", "average the period returns of `{m}`"),
    ),
    (
        r"Relative dispersion of {m}: 100 \* std / mean",
        ("relate the spread of `{m}` to its level", "divide the std of `{m}` by its mean, in percent"),
    ),
    (
        r"Two steps: rank {g} groups by summed {m1}, then average {m2} inside the winner",
        ("find the `{g}` whose `{m1}` adds up highest, then average `{m2}` there", "total `{m1}` per `{g}` first"),
    ),
    (
        r"Compute a group mean, use it as a threshold over the whole table, express the count as a percentage",
        ("take one group's mean and the percent of rows above it", "use a group average as the cut-off"),
    ),
    (
        r"Extract the year from {d} and count records per year",
        ("tally the rows by the year in `{d}`", "group `{d}` by year and find the busiest"),
    ),
    (
        r"Average {m} per year; growth = \(last - first\) / first \* 100",
        (
            "take the yearly mean of `{m}` and set the last year against the first",
            "measure how `{m}` grew across the years",
        ),
    ),
    (
        r"Group records by the month of {d}, sum {m}, report the top month",
        ("total `{m}` per month of `{d}`", "find the month with the most `{m}`"),
    ),
    (
        r"Parse {d} as dates and take max - min in whole days",
        ("parse `{d}` and count the days from first to last", "measure the time `{d}` covers"),
    ),
    (
        r"Derived ratio column {a}/{b}, then its mean",
        ("compute `{a}` over `{b}` per row and average it", "build the per-row ratio of `{a}` to `{b}`"),
    ),
    (
        r"z = \({m} - mean\) / std; report max z",
        ("standardise `{m}` and find the largest z", "see how far the top `{m}` sits in standard deviations"),
    ),
    (
        r"Quantile binning of {m} with pandas qcut, count of the top bin",
        ("cut `{m}` into quartiles and count the top one", "bin `{m}` by quantile"),
    ),
    (
        r"Extract month from {d}; mode of the new feature",
        ("derive the month from `{d}` and find the usual one", "see which month of `{d}` comes up most"),
    ),
    (
        r"Deduplicate, then filter incomplete rows on the named columns; count the rest",
        ("drop repeated rows and rows with gaps, then count", "clean the rows and count what survives"),
    ),
    (
        r"Median imputation followed by min-max normalisation of {m}",
        ("fill blank `{m}` with its median and rescale to 0-1", "impute, then min-max scale `{m}`"),
    ),
    (
        r"Categorical encoding of {g}; answer as 'columns, ones'",
        ("one-hot encode `{g}` and count columns and ones", "turn `{g}` into indicator columns"),
    ),
    (
        r"Linear correlation of {x} and {y} over rows where both are present",
        ("correlate `{x}` with `{y}` on rows that have both", "see whether `{x}` and `{y}` move together"),
    ),
    (
        r"Correlate each candidate with {y} \(pairwise complete rows\) and pick the largest \|r\|",
        ("correlate every candidate with `{y}` and keep the strongest", "find what tracks `{y}` best"),
    ),
    (
        r"Naive effect estimate: difference in mean {y} between the above-median and the other {x} records"
        r" \(rows with both values present\)",
        ("split at the median `{x}` and compare mean `{y}` on both sides", "contrast `{y}` for high and low `{x}`"),
    ),
    (
        r"Stratified \(adjusted\) difference in means, using {g} as the confounder",
        ("compare the means inside each `{g}` and weight the gaps", "hold `{g}` fixed while comparing"),
    ),
    (
        r"Slope of the ordinary least squares line of {y} on {x}",
        ("fit a line through `{y}` against `{x}` and read the slope", "regress `{y}` on `{x}`"),
    ),
    (
        r"Group mean minus overall mean of {m}",
        ("see how far that group's mean `{m}` sits from the overall one", "set the group average against all rows"),
    ),
    (
        r"Tukey fences on {m}; count the outliers",
        ("count `{m}` values outside the 1.5 IQR fences", "apply the IQR rule to `{m}`"),
    ),
    (
        r"Z-score outliers of {m} at threshold {k}",
        ("count `{m}` values beyond {k} standard deviations", "flag `{m}` by z-score at {k}"),
    ),
    (
        r"Sample skewness of {m} and a label from the \+/-0\.5 rule of thumb",
        ("measure the skew of `{m}` and name its direction", "check which way `{m}` leans"),
    ),
    (
        r"Shapiro-Wilk on the non-missing {m} values",
        ("test `{m}` for normality (Shapiro-Wilk)", "run a Shapiro-Wilk test on `{m}`"),
    ),
    (
        r"Non-parametric comparison of two {g} groups on {m}",
        ("compare `{m}` between the two `{g}` groups with Mann-Whitney", "rank-test `{m}` across the two groups"),
    ),
)


def _plan_pattern(template: str) -> re.Pattern:
    """A description template as a regex: each ``{slot}`` captures a column name (a repeat must match the same)."""
    seen: set[str] = set()

    def slot(m: re.Match) -> str:
        name = m.group(1)
        if name in seen:
            return f"(?P={name})"
        seen.add(name)
        return f"(?P<{name}>.+?)"

    return re.compile("^" + re.sub(r"\{(\w+)\}", slot, template) + r"\.?$", re.DOTALL)


_PLAN_PATTERNS = tuple((_plan_pattern(template), phrasings) for template, phrasings in _PLANS)


def plan_text(description: str | None, previous: str | None = None, seed: str = "") -> str | None:
    """A step's description as an analyst's plan, in words of the analyst's own (``_PLANS``): the columns it
    names, the earlier result named by the variable holding it; None where the description is not one the
    synthesizer writes (the thought then says how the step computes, never the description itself)."""
    text = _BUILDS_ON.sub("", description or "").strip()
    found = [(m, phrasings) for pattern, phrasings in _PLAN_PATTERNS if (m := pattern.match(text))]
    if not found:
        return None
    # the template that explains most of the text ("Sample standard deviation of {m}" also matches "... of {m}
    # inside the previous step's {g} group", with a slot that swallowed the rest)
    m, phrasings = min(found, key=lambda f: sum(len(v or "") for v in f[0].groupdict().values()))
    slots = {k: v for k, v in m.groupdict().items() if v is not None}
    slots["P"] = f"`{previous}`" if previous else "that value"
    return pick(phrasings, seed, "plan-" + text).format(**slots)


_SENTENCE_WORDS = frozenset(
    "the a an no zero it its table good first now so next with after one two three four five six seven eight nine "
    "ten only none shape".split()
)


def cap_word(text: str) -> str:
    return text[:1].upper() + text[1:]


def cap(text: str) -> str:
    """``text`` with a capital first letter where it starts with an ordinary word; a value or a name from the
    data keeps its spelling ("shipped is the most frequent status", "`x` = 3")."""
    first = re.match(r"[A-Za-z]+", text or "")
    if first and first.group(0).lower() in _SENTENCE_WORDS:
        return text[0].upper() + text[1:]
    return text


def _num(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def _fraction_words(share: float) -> str:
    for bound, words in (
        (0.02, "a sliver"),
        (0.08, "a small minority"),
        (0.2, "roughly a tenth to a fifth"),
        (0.3, "about a quarter"),
        (0.4, "about a third"),
        (0.47, "a bit under half"),
        (0.53, "about half"),
        (0.62, "a bit over half"),
        (0.72, "about two thirds"),
        (0.85, "about three quarters"),
        (0.97, "most"),
    ):
        if share < bound:
            return words
    return "nearly all"


def _pct(part: float, whole: float) -> str:
    share = 100 * part / whole
    return f"{share:.0f}%" if share >= 1 else f"{share:.1f}%"


@dataclass(frozen=True)
class Result:
    """One printed result and what it is: the context a reaction is written from."""

    value: str  # what the cell printed
    var: str | None  # the variable holding it
    what: str  # description + program, lower case: what was computed
    rows: int | None  # records of the relation it was computed over
    column: str | None  # the column it is about
    kind_of_var: str = "value"  # value | text: what the variable holds (see cells.use_variable)


# "group mean minus overall mean of price", "the group's average minus the others'": the two sides, by name
_MINUS = re.compile(r"(?:^|[(:;,]\s*)(?P<a>[\w'’ ]{3,40}?)\s+minus\s+(?P<b>[\w'’ ]{3,40}?)(?=\s+of\b|[).,;:]|$)")


def _which_is_higher(what: str, x: float) -> str:
    """Which side of a difference is the larger, named from the step's own words where it says "A minus B"."""
    m = _MINUS.search(what)
    if m and "first" not in m.group("a").lower():
        a, b = m.group("a").strip(), m.group("b").strip()
        words = a.split()
        if len(words) > 1 and words[0].istitle() and all(w.islower() for w in words[1:]):
            a = a[0].lower() + a[1:]  # a description's sentence case, not a name ("Group mean")
        return f"{a} is above {b}" if x > 0 else f"{a} is below {b}"
    return f"{'positive' if x > 0 else 'negative'}, so the first quantity is the {'larger' if x > 0 else 'smaller'}"


# A whole-column mean: no filter, group or other statistic in what computed it (a group's mean minus the overall
# median mixes the group's effect with the column's shape, and says nothing about either alone).
_WHOLE_MEAN = re.compile(r"\bmean\b|\baverage\b|\bavg\(", re.IGNORECASE)
_NOT_WHOLE = re.compile(
    r"median|==|!=|\bwhere\b|\.loc\[|groupby|group by|records of|within|group|quantile|std|\[df\[", re.IGNORECASE
)


def skew_note(before: Result | None, r: Result) -> str | None:
    """What a whole column's mean minus its median says about the column's shape, where ``before`` printed that
    mean and ``r`` printed the difference: a mean well above the median is a tail of large values pulling it
    (the surprise an analyst remarks on before reporting an average), well below a tail of small ones."""
    if before is None or not before.column or before.column != r.column:
        return None
    mean, gap = _num(before.value.strip()), _num(r.value.strip())
    if mean is None or gap is None or mean == 0 or not math.isfinite(mean) or not math.isfinite(gap):
        return None
    if not _WHOLE_MEAN.search(before.what) or _NOT_WHOLE.search(before.what):
        return None
    literal = re.escape(before.value.strip())
    # the difference is that very mean minus the median (its program holds the printed mean as the first term)
    if not re.search(rf"{literal}\s*-\s*.*median|{literal}\s*-\s*median", r.what, re.IGNORECASE):
        return None
    # (in words only: a later step may put the gap on the mean's scale, and a thought does not compute ahead)
    col, rel = f"`{r.column}`", gap / abs(mean)
    if abs(rel) > 0.1:
        side = ("large", "above") if rel > 0 else ("small", "below")
        return (
            f"a tail of {side[0]} {col} values pulls the average well {side[1]} the median, which is the more "
            "typical value"
        )
    if abs(rel) < 0.02:
        return f"mean and median almost agree, so {col} is close to symmetric"
    return None


def react(r: Result, seed: str, salt: str) -> str:
    """One clause that reads a printed result the way an analyst would: what the number means against the
    rows it came from, its sign, its strength, or the size of the group; quoting the value itself."""
    v, what, name = r.value.strip(), r.what, f"`{r.var}`" if r.var else "the result"
    x = _num(v)
    col = f"`{r.column}`" if r.column else "the column"
    if v in ("Yes", "No", "True", "False"):
        return pick((f"the check says {v}", f"{name} comes out {v}", f"it is a plain {v}"), seed, salt)
    if "\n" in v or "; " in v:
        items = [i for i in re.split(r";\s*|\n", v) if i.strip()]
        return pick(
            (
                f"{len(items)} entries come back, starting with {short(items[0], 50)}",
                f"the list has {len(items)} entries",
            ),
            seed,
            salt,
        )
    if x is None:
        if ", " in v and len(v) < 120:
            return pick((f"the row reads {v}", f"{name} holds {v}"), seed, salt)
        if re.search(r"outlier|fences", what) and re.search(r"\d", v):
            return f"{short(v, 80)}, so the rule does flag values" if not v.startswith("0") else short(v, 80)
        leads = (
            "most frequent"
            if re.search(r"mode of|most common|most frequent|value_counts|count\(\*\) desc", what)
            else None
        )
        if leads:
            return pick(
                (
                    f"{short(v, 60)} is the most frequent value of {col}",
                    f"{short(v, 60)} occurs most often",
                    f"{name} is {short(v, 60)}",
                ),
                seed,
                salt,
            )
        return pick(
            (f"{short(v, 60)} comes out on top", f"{name} is {short(v, 60)}", f"the winner is {short(v, 60)}"),
            seed,
            salt,
        )
    if re.search(r"outlier|fences", what) and float(x).is_integer():
        n = int(x)
        if n == 0:
            return pick(
                (
                    "no value lies outside the fences: no outliers by this rule",
                    f"zero outliers in {col}: the spread has no stray tail by the 1.5 IQR rule",
                ),
                seed,
                salt,
            )
        share = f" of {r.rows} rows ({_pct(n, r.rows)})" if r.rows and n <= r.rows else ""
        if r.rows and n / r.rows > 0.1:
            return (
                f"{n}{share} fall outside the fences - a lot for outliers; {col} looks skewed rather than "
                "dotted with a few bad values"
            )
        return pick(
            (
                f"{n}{share} lie outside the fences: a thin tail worth a look, not enough to move the mean much",
                f"{n} outlier{'s' if n != 1 else ''}{share} - few, so they are extreme values rather than a "
                "second population",
            ),
            seed,
            salt,
        )
    if re.search(r"\bz = |z-?score", what):
        return (
            f"a largest z of {v}: at least one value sits more than three standard deviations out"
            if abs(x) > 3
            else f"a largest z of {v}: nothing is beyond three standard deviations"
        )
    if re.search(r"correlation|corrcoef|\.corr\(", what) and -1 <= x <= 1:
        strength = (
            "no real" if abs(x) < 0.1 else "a weak" if abs(x) < 0.3 else "a moderate" if abs(x) < 0.5 else "a strong"
        )
        sign = "" if abs(x) < 0.1 else " positive" if x > 0 else " negative"
        return pick(
            (f"r = {v}, {strength}{sign} linear relation", f"{v} means {strength}{sign} association"), seed, salt
        )
    if re.search(r"p-?value|pvalue|ttest|shapiro|chi2|f_oneway|kruskal", what) and 0 <= x <= 1:
        return f"p = {v}, {'below' if x < 0.05 else 'above'} the usual 0.05 level"
    # a percent only where the step divides: a name that says percent (a column `Percentage`, a variable
    # `pct_share`) is gone from ``what``, and a difference of two percentages is a difference
    if re.search(r"percent(?!ile)|percentile rank|share of|\* 100\b", what) and cells.RATIO_COMPUTED.search(what):
        share = re.search(
            r"share of|percentile rank|attributable|count by the number|number of records|of (?:the )?records", what
        )
        if share and 0 <= x <= 100:
            return pick(
                (f"{v}%, {_fraction_words(x / 100)}", f"{name} is {v} percent - {_fraction_words(x / 100)}"),
                seed,
                salt,
            )
        if 0 <= x <= 100:
            return pick((f"{name} is {v} percent", f"{v} percent for {name}"), seed, salt)
        if x < 0:
            return f"{name} is {v} percent, below zero: a relative gap, not a share of a whole"
        return f"{name} is {v} percent, over 100: the value is larger than the base it is measured against"
    if cells.DIFFERENCE.search(what):
        if x == 0:
            return f"{name} is exactly 0: no difference at all"
        sign = "positive" if x > 0 else "negative"
        return pick((f"{name} is {v}: {_which_is_higher(what, x)}", f"a {sign} gap of {v}"), seed, salt)
    if re.search(r"\bratio\b|divide", what) and "percent" not in what:
        return f"{name} is {v}, {'above' if x > 1 else 'below' if x < 1 else 'exactly'} 1"
    if re.search(r"value_counts\(\)\.idxmax|mode of|most common|most frequent|order by count\(\*\) desc", what):
        # the most frequent value (a year, a month): what is counted is its records, not the value itself
        return pick((f"{v} occurs most often", f"the most frequent value is {v}"), seed, salt)
    counting = re.search(r"\bcount(?:s|ing|ed)?\b|how many|count\(\*\)|len\(|nunique|distinct|\.sum\(\)\)", what)
    if counting and float(x).is_integer() and x >= 0:
        n = int(x)
        if "distinct" in what or "nunique" in what:
            return pick((f"{n} distinct values", f"{name} = {n} different values"), seed, salt)
        if n == 0:
            return pick(("no record matches", f"{name} is 0: nothing qualifies"), seed, salt)
        if r.rows and n <= r.rows:
            small = n <= 5 and r.rows >= 30
            tail = " - a small group, so anything averaged over it rests on few rows" if small else ""
            return pick(
                (
                    f"{n} of {r.rows} records ({_pct(n, r.rows)}){tail}",
                    f"{name} = {n}, {_fraction_words(n / r.rows)} of the {r.rows} rows{tail}",
                ),
                seed,
                salt,
            )
        return pick((f"{name} = {n}", f"{n} records"), seed, salt)
    about = f" for {col}" if r.column else ""
    if r.var:
        return pick((f"{name} = {v}", f"{name} comes to {v}", f"{name} holds {v}"), seed, salt)
    return pick((f"the step gives {v}{about}", f"it works out to {v}{about}"), seed, salt)
