"""How the offline expert writes its cells as one analyst session: a value a step computes lives on in a named
variable, a later step uses that variable (never the printed, rounded text pasted back as a literal), and a
database step computes in SQL and reads its one-line result file into that variable.

Every rewrite here keeps what a cell prints: a variable holds exactly the value the literal it replaces was
written from (the synthesizer embeds the previous step's printed answer), and where that cannot be shown
from the program's text the cell is left as it was.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
import unicodedata

import pandas as pd

_NUMBER_TEXT = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


# -- names ------------------------------------------------------------------------------------------
def slug(text: str, limit: int = 24) -> str:
    """An identifier-friendly form of a column name: ASCII, lower case, underscores."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    s = re.sub(r"[^0-9a-zA-Z]+", "_", ascii_text).strip("_").lower()
    s = re.sub(r"_+", "_", s)[:limit].strip("_")
    return s or "value"


# A step that subtracts one value from another (what its description or program says it computes)
DIFFERENCE = re.compile(
    r"difference|subtract|minus|\bgap\b|inside - outside|contrast|effect estimate|with the median of", re.IGNORECASE
)
# A step that divides (a share, a percentage of a base, a rank as a fraction): only such a step yields a percent
RATIO_COMPUTED = re.compile(r"/|\* ?100\b|\b100(?:\.0)? ?\*|pct=true|normalize=true|percentile rank", re.IGNORECASE)


def step_text(description: str, program: str, columns) -> str:
    """What a step computes, as the text that says it: its own description (not the clause naming the step it
    builds on) and its own program, without the column names they hold, in lower case. Never the cell as the
    session wrote it: the names of the session's variables (``avg_percentage``) say what earlier steps held."""
    description = re.sub(r"\s*Builds on the previous question:.*$", "", description or "", flags=re.DOTALL)
    return without_names(f"{description}\n{program or ''}", columns).lower()


# (what the step computes, read from its description or program) -> the variable's prefix
_PREFIXES: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), prefix)
    for p, prefix in (
        (r"percentile rank", "pct_rank"),
        (r"coefficient of variation", "cv"),
        (r"\bslope\b|least squares", "slope"),
        (r"skew", "skew"),
        (r"outlier|fences|beyond mean", "n_outliers"),  # (z-score outliers are counted: a count)
        (r"\bz = |z-?score", "max_z"),
        (r"binary feature|\bflag\b", "n_flagged"),
        (r"correlation|\bcorr\(|corrcoef", "r"),
        (r"\biqr\b|interquartile|middle half", "iqr"),
        (r"\b50th percentile\b", "median"),
        (r"\d+(?:st|nd|rd|th) percentile\b|quantile\(", "pctl"),
        (r"percent(?!ile)|share of|\* 100\b|100\.0 \*", "pct"),
        (r"\bratio\b|divide", "ratio"),
        (r"date span|days\b|julianday", "days"),
        (DIFFERENCE.pattern, "gap"),
        (r"top month", "top_month"),
        (r"mode of|most common|most frequent|value_counts\(\)\.idxmax|order by count\(\*\) desc", "top"),
        (r"rank by|report the group|largest mean|idxmax|idxmin|order by (?:avg|sum)\(", "rank"),
        (r"normali[sz]", "avg_scaled"),
        (r"count (?:the )?(?:rows|records) (?:strictly )?(?:above|below)", "n_above"),
        (r"\bmax\(\s*\) - min\(|\brange\b", "range"),
        (r"\bmaximum\b", "max"),
        (r"\bminimum\b", "min"),
        (r"median", "median"),
        (r"standard deviation|\.std\(|stddev", "std"),
        (r"\bmean\b|\baverage\b|\.mean\(|avg\(", "avg"),
        (r"threshold", "n_above"),
        (r"distinct|nunique", "n_distinct"),
        (r"\bcount\b|how many|count\(\*\)|len\(", "n"),
        (r"\bsum\b|summed|\btotal\b|\]\.sum\(\)|\bSUM\(", "total"),
    )
)


def variable_name(description: str, program: str, columns: list[str], value: str, taken: set[str]) -> str:
    """A name an analyst would give the value a step computes (``avg_revenue``, ``top_region``, ``n_outliers``),
    unique in the session."""
    text = step_text(description, program, columns)
    value = (value or "").strip()
    numeric = _NUMBER_TEXT.fullmatch(value) is not None
    # a step that ranks and then computes a number ("rank groups by total, then average inside the winner") holds
    # that number, not the winner (the "rank" prefix is the winner's, "top", and only for a value that is not a number)
    prefix = next((p for pattern, p in _PREFIXES if pattern.search(text) and not (p == "rank" and numeric)), "")
    prefix = "top" if prefix == "rank" else prefix  # (a mode stays one: a year or a month is a number)
    if not value:  # the expected value is not known: the description and program name it alone
        pass
    elif ", " in value or "; " in value or "\n" in value:
        prefix = "summary"
    elif value in ("Yes", "No", "True", "False"):
        prefix = "verdict"
    elif not numeric and not prefix.startswith("top"):
        prefix = "top"
    column = _main_column(program, columns, prefix)
    if prefix in ("max_z", "n_outliers", "r", "slope", "days") and column:
        name = f"{prefix}_{slug(column, 16)}" if prefix not in ("max_z",) else f"max_z_{slug(column, 16)}"
    elif prefix == "summary" and column:
        name = f"{slug(column)}_summary"
    elif prefix and column:
        name = f"{prefix}_{slug(column)}"
    else:
        name = {"n": "n_records", "": "result"}.get(prefix, prefix)
    if keyword.iskeyword(name) or not name.isidentifier() or name in _RESERVED:
        name = f"{name}_value"
    base, i = name, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


_RESERVED = {
    "df",
    "pd",
    "np",
    "answer",
    "rows",
    "t",
    "clean",
    "sub",
    "vals",
    "flag",
    "inside",
    "outside",
    "csv",
    "query",
}


def without_names(text: str, names) -> str:
    """``text`` without the column names it holds: a column called "Percentage" or "Total" says nothing about
    what a step computes."""
    for name in sorted((n for n in names if n), key=len, reverse=True):
        text = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", " ", text, flags=re.IGNORECASE)
    return text


def subject_column(description: str, program: str, columns: list[str], value: str) -> str | None:
    """The column a printed result is about (the grouped column of a top value, else the measure)."""
    numeric = _NUMBER_TEXT.fullmatch((value or "").strip()) is not None
    return _main_column(program, columns, "top" if not numeric else "")


def _main_column(program: str, columns: list[str], prefix: str) -> str | None:
    """The column a result is about: the grouped column for a top value, else the first column the step names."""
    if not columns:
        return None
    if prefix == "top":
        m = re.search(r"groupby\(\s*['\"]([^'\"]+)['\"]", program) or re.search(
            r"\[['\"]([^'\"]+)['\"]\]\.value_counts", program
        )
        if m and m.group(1) in columns:
            return m.group(1)
        m = re.search(r'SELECT\s+"((?:[^"]|"")+)"', program, re.IGNORECASE)
        if m and m.group(1).replace('""', '"') in columns:
            return m.group(1).replace('""', '"')
    if prefix == "days":  # the date column whose span it is, not the group that selects the rows
        m = re.search(r"to_datetime\([^\n]*?,\s*['\"]([^'\"]+)['\"]\s*\]", program) or re.search(
            r'julianday\(\s*(?:MAX|MIN)?\(?\s*"((?:[^"]|"")+)"', program, re.IGNORECASE
        )
        if m and m.group(1).replace('""', '"') in columns:
            return m.group(1).replace('""', '"')
    if prefix != "top":  # the measure an aggregate is taken of: the one the name's aggregate is taken of first
        # (a mean gap split by a median of another column is a gap of the averaged column)
        hits = [
            (m.group("col").replace('""', '"'), m.group("agg").lower())
            for pattern in _AGGREGATED
            for m in pattern.finditer(program)
            if m.group("col").replace('""', '"') in columns
        ]
        own = _PREFIX_AGGREGATE.get(prefix, ())
        if hits:
            return min(hits, key=lambda hit: hit[1] not in own)[0]  # min is stable: the first hit among equals
    return columns[-1] if prefix == "top" and len(columns) > 1 and "value_counts" not in program else columns[0]


_AGGS = r"(?P<agg>mean|median|std|sum|max|min|var|quantile|skew|nunique|count|corr)"
# (the column is the named group "col": in the SQL pattern the aggregate comes first, so a numbered group would
# read "AVG" there, no column would match, and the name fell back to the first column named, the group's)
_AGGREGATED = (
    re.compile(r"\[\s*['\"](?P<col>[^'\"]+)['\"]\s*\]\s*\." + _AGGS + r"\("),
    re.compile(r",\s*['\"](?P<col>[^'\"]+)['\"]\s*\]\s*\." + _AGGS + r"\("),
    re.compile(
        r"\b(?P<agg>AVG|SUM|MEDIAN|STDDEV_SAMP|STDDEV|MAX|MIN|COUNT|CORR)\(\s*(?:DISTINCT\s+)?\"(?P<col>(?:[^\"]|\"\")+)\"",
        re.I,
    ),
    # an aggregate over a condition (AVG(CASE WHEN "g" = 'v' THEN "m" END)) is taken of the column after THEN
    re.compile(
        r"\b(?P<agg>AVG|SUM|MEDIAN|STDDEV_SAMP|STDDEV|MAX|MIN|COUNT)\(\s*CASE\s+WHEN\b(?:(?!\bEND\b).)*?"
        r"\bTHEN\s+\"(?P<col>(?:[^\"]|\"\")+)\"",
        re.I | re.S,
    ),
)
# a name's prefix -> the aggregates (pandas method or SQL function, lower case) that compute what it holds
_PREFIX_AGGREGATE = {
    "avg": ("mean", "avg"),
    "gap": ("mean", "avg"),
    "median": ("median",),
    "std": ("std", "stddev", "stddev_samp"),
    "r": ("corr",),
}


# -- renaming the result of a step --------------------------------------------------------------------
def _name_positions(code: str, name: str) -> list[tuple[int, int]] | None:
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    out = []
    for i, tok in enumerate(toks):
        if tok.type == tokenize.NAME and tok.string == name:
            prev = toks[i - 1].string if i else ""
            if prev == ".":  # an attribute of something else
                continue
            out.append(tok.start)
    return out


def _replace_at(code: str, spans: list[tuple[tuple[int, int], tuple[int, int], str]]) -> str:
    """Replace (start, end) token spans, given as (row, col) pairs, with new texts."""
    lines = code.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    pieces, last = [], 0
    for (sr, sc), (er, ec), text in sorted(spans):
        a, b = offsets[sr - 1] + sc, offsets[er - 1] + ec
        pieces.append(code[last:a])
        pieces.append(text)
        last = b
    pieces.append(code[last:])
    return "".join(pieces)


def rename_result(code: str, new: str, old: str = "answer") -> str:
    """``code`` with its result variable ``old`` called ``new``; unchanged when it has none."""
    positions = _name_positions(code, old)
    if not positions:
        return code
    return _replace_at(code, [((r, c), (r, c + len(old)), new) for r, c in positions])


_PRINT_ROWS_TAIL = re.compile(
    r"\n*def _cell\(v\):\n    return repr\(round\(v, 4\)\) if isinstance\(v, float\) else str\(v\)\n\n"
    r"if len\(rows\) == 1 and len\(rows\[0\]\) == 1:\n    print\(_cell\(rows\[0\]\[0\]\)\)\n"
    r"elif all\(len\(r\) == 1 for r in rows\):\n    print\(\", \"\.join\(_cell\(r\[0\]\) for r in rows\)\)\nelse:\n"
    r"    print\(\"; \"\.join\(\", \"\.join\(_cell\(v\) for v in r\) for r in rows\)\)\n?$"
)


def scalar_tail(code: str, name: str, expected: str | None) -> str:
    """A query run in DuckDB or polars prints its one cell through a small formatting function: for a result
    known to be one cell (``expected``, the step's reference answer, holds no separator) the cell goes into
    ``name`` instead, rounded as that function rounds it, and is printed from there."""
    if expected is None or ", " in expected or "; " in expected or not _PRINT_ROWS_TAIL.search(code):
        return code
    tail = f"\n{name} = rows[0][0]\nif isinstance({name}, float):\n    {name} = round({name}, 4)\nprint({name})\n"
    return _PRINT_ROWS_TAIL.sub(lambda _m: tail, code)


def result_name(code: str) -> str | None:
    """The variable a cell prints last as its result (``print(x)`` on its last line), if any."""
    m = re.search(r"^print\((\w+)\)\s*$", code.strip().splitlines()[-1] if code.strip() else "")
    return m.group(1) if m else None


# -- using an earlier result ------------------------------------------------------------------------------
def _same_number(token: str, printed: str) -> bool:
    try:
        return float(token) == float(printed) and _NUMBER_TEXT.fullmatch(token.lstrip("-")) is not None
    except ValueError:
        return False


def _as_string(token: str) -> str | None:
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _fstring(text: str, prefix: str = "f") -> str | None:
    """``text`` as a triple-quoted (f-)string literal, or None when it cannot be written as one cleanly."""
    if "\\" in text:
        return None
    for quote in ('"""', "'''"):
        if quote not in text and not text.endswith(quote[0]):
            return prefix + quote + text + quote
    return None


def _sql_literal_pattern(printed: str, numeric: bool) -> re.Pattern:
    if numeric:
        return re.compile(r"(?<![\w.'])" + re.escape(printed) + r"(?![\w.'])")
    return re.compile(r"'" + re.escape(printed.replace("'", "''")) + r"'")


def use_variable(code: str, printed: str, name: str, kind: str, columns: list[str] = ()) -> str:
    """``code`` with the literal that repeats ``printed`` (an earlier step's output) replaced by the variable
    ``name`` holding it. ``kind``: "value" (the variable holds the value itself: a number, or the data's
    text) or "text" (it holds the printed text, as a database step's result read as text does).

    A Python literal becomes the variable (wrapped in ``float``/``int`` where the variable holds text and the
    literal was a number). Inside the SQL an ``execute_sql`` call runs, the literal becomes the placeholder
    ``:name`` and the call binds ``params={"name": ...}``, as an analyst passes a value to a query; inside SQL
    another engine runs (DuckDB over a frame), the string becomes an f-string with ``{name}`` in its place. A
    number is replaced only where it occurs once in the cell (``round(x, 2)`` after a count of 2 is not the
    count); unchanged where the literal is not found or cannot be replaced cleanly."""
    printed = (printed or "").strip()
    if not printed or "\n" in printed or "{" in printed or "}" in printed or printed in columns:
        return code
    numeric = _NUMBER_TEXT.fullmatch(printed) is not None
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return code
    bindable = _execute_sql_texts(code)
    spans, hits, bound = [], 0, []
    for i, tok in enumerate(toks):
        if tok.type == tokenize.NUMBER and numeric:
            unary = i >= 1 and toks[i - 1].string == "-" and _unary(toks, i - 1)
            text = ("-" if unary else "") + tok.string
            if not _same_number(text, printed):
                hits += _same_number(tok.string, printed.lstrip("-"))  # the same digits: ambiguous
                continue
            hits += 1
            start = toks[i - 1].start if unary else tok.start
            spans.append((start, tok.end, _cast(name, printed) if kind == "text" else name))
        elif tok.type == tokenize.STRING:
            value = _as_string(tok.string)
            if value is None or tok.string[:1] in "fFbBrR":
                continue
            if value == printed and not numeric:
                hits += 1
                spans.append((tok.start, tok.end, name))
                continue
            if not _looks_like_sql(value) or "'" in printed:
                continue
            pattern = _sql_literal_pattern(printed, numeric)
            found = len(pattern.findall(value))
            if not found:
                continue
            hits += found
            if value in bindable and f":{name}" not in value:
                literal = _fstring(pattern.sub(lambda _m: f":{name}", value), prefix="")
                bound.append(value)
            else:
                escaped = value.replace("{", "{{").replace("}", "}}")
                literal = _fstring(pattern.sub(lambda _m: "{" + name + "}" if numeric else "'{" + name + "}'", escaped))
            if literal is None:
                return code
            spans.append((tok.start, tok.end, literal))
    if not spans or (numeric and hits != 1):
        return code
    if bound:
        binding = _cast(name, printed) if kind == "text" and numeric else name
        inserts = _params_inserts(code, set(bound), f"params={{{name!r}: {binding}}}")
        if inserts is None:
            return code
        spans += inserts
    out = _replace_at(code, spans)
    try:
        ast.parse(out)
    except SyntaxError:
        return code
    return out


def _cast(name: str, printed: str) -> str:
    """The variable as the number it holds, where it holds the printed text of one."""
    cast = "int" if re.fullmatch(r"-?\d+", printed) else "float"
    return f"{cast}({name})"


def _execute_sql_texts(code: str) -> set[str]:
    """The SQL texts ``execute_sql`` calls of ``code`` run: a literal argument, or a name the cell assigned one."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    names = {
        n.targets[0].id: n.value.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
    }
    out = set()
    for call in _execute_sql_calls(tree):
        arg = _sql_argument(call)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            out.add(arg.value)
        elif isinstance(arg, ast.Name) and arg.id in names:
            out.add(names[arg.id])
    return out


def _execute_sql_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "execute_sql"]


def _sql_argument(call: ast.Call) -> ast.expr | None:
    return call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "sql"), None)


def _params_inserts(code: str, texts: set[str], argument: str) -> list | None:
    """Zero-width spans that add ``argument`` as the last argument of each ``execute_sql`` call running one of
    ``texts``; None where such a call already binds parameters (two bindings would not merge cleanly)."""
    tree = ast.parse(code)
    names = {
        n.targets[0].id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
        and n.value.value in texts
    }
    lines = code.splitlines(keepends=True)
    out = []
    for call in _execute_sql_calls(tree):
        arg = _sql_argument(call)
        runs = (isinstance(arg, ast.Constant) and arg.value in texts) or (isinstance(arg, ast.Name) and arg.id in names)
        if not runs:
            continue
        if len(call.args) > 2 or any(k.arg == "params" for k in call.keywords):
            return None
        line = lines[call.end_lineno - 1]
        col = len(line.encode()[: call.end_col_offset].decode()) - 1  # the closing parenthesis (AST counts bytes)
        out.append(((call.end_lineno, col), (call.end_lineno, col), f", {argument}"))
    return out


def _unary(toks: list, i: int) -> bool:
    """Whether the ``-`` at ``toks[i]`` is a sign (after an operator, a bracket or a keyword), not a minus."""
    if i == 0:
        return True
    prev = toks[i - 1]
    if prev.type in (tokenize.NUMBER, tokenize.STRING) or prev.string in (")", "]", "}"):
        return False
    return not (prev.type == tokenize.NAME and not keyword.iskeyword(prev.string))


def _looks_like_sql(text: str) -> bool:
    return re.search(r"\bSELECT\b", text, re.IGNORECASE) is not None


# -- database steps ------------------------------------------------------------------------------------
def sql_text(sql: str) -> str:
    """A SQL statement as a Python string literal: triple double quotes where the text allows it."""
    sql = sql.strip()
    return _fstring(sql, prefix="") or repr(sql)


def reads_back_exactly(expected: str) -> bool:
    """Whether pandas, reading a one-cell result file holding ``expected``, prints it back unchanged."""
    try:
        frame = pd.read_csv(io.StringIO("value\n" + _csv_cell(expected)))
    except Exception:  # noqa: BLE001 - any parse trouble: read the cell as text instead
        return False
    if frame.shape != (1, 1):
        return False
    return str(frame.iat[0, 0]) == expected


def _csv_cell(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(ch in text for ch in ',"\n') else text


def sql_cell(sql: str, name: str, expected: str | None, *, import_pandas: bool) -> str:
    """A database step: the query runs through ``execute_sql``, its result file is read into ``name`` (one cell
    as the value itself; several cells as text joined the way answers list them) and printed."""
    path = f"{name}.csv"
    head = "import pandas as pd\n\n" if import_pandas else ""
    if "\n" in sql.strip():  # a query over several lines (a CTE): written out first, then run
        run = f"query = {sql_text(sql)}\nexecute_sql(sql=query, output_path={path!r})\n"
    else:
        run = f"execute_sql(sql={sql_text(sql)}, output_path={path!r})\n"
    single = expected is not None and ", " not in expected and "; " not in expected and expected != ""
    if single and reads_back_exactly(expected):
        read = f"{name} = pd.read_csv({path!r}).iat[0, 0]\nprint({name})"
    elif single:
        read = f"{name} = pd.read_csv({path!r}, dtype=str, keep_default_na=False).iat[0, 0]\nprint({name})"
    else:
        # one column is a list of values, several are rows of cells (as ``format_rows`` writes answers)
        read = (
            f"{name} = pd.read_csv({path!r}, dtype=str, keep_default_na=False)\n"
            f"if {name}.shape[1] == 1:\n"
            f'    print(", ".join({name}.iloc[:, 0]))\n'
            "else:\n"
            f'    print("; ".join(", ".join(row) for row in {name}.itertuples(index=False)))'
        )
    return head + run + read


# -- narrowing what a step fetches --------------------------------------------------------------------
_WHOLE_TABLE_LOAD = re.compile(
    r"^execute_sql\(sql='SELECT \* FROM \"((?:[^\"]|\"\")+)\"', output_path='relation\.csv'\)\n"
    r"df = pd\.read_csv\('relation\.csv'\)\n",
    re.MULTILINE,
)
# what a program may do with `df` and still see the same values when the frame holds only the columns it names
_FRAME_USE_OK = re.compile(r"^(?:\[|\.loc\[|\.groupby\(|\.shape\[0\]|\)$)")


def whole_table_load(program: str) -> re.Match | None:
    return _WHOLE_TABLE_LOAD.search(program)


def uses_only_named_columns(body: str) -> bool:
    """Whether ``body`` touches ``df`` only through named columns (``df['x']``, ``df.loc[...]``,
    ``df.groupby('x')``, ``len(df)``): then fetching only those columns changes nothing it computes."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(body).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    for i, tok in enumerate(toks):
        if tok.type == tokenize.STRING:
            value = _as_string(tok.string) if tok.string[:1] not in "fFbB" else None
            if (
                value is not None
                and re.search(r"\bFROM\s+(?:df|t)\b", value)
                and re.search(r"(?<!COUNT\()\*", value.replace("COUNT(*)", ""))
            ):
                return False  # a query over the whole frame (DISTINCT *, SELECT *)
            continue
        if tok.type != tokenize.NAME or tok.string != "df":
            continue
        prev = toks[i - 1].string if i else ""
        rest = "".join(t.string for t in toks[i + 1 : i + 4])
        if prev == ".":
            continue
        if rest.startswith("=") and not rest.startswith("=="):
            return False  # the frame is replaced: what follows may use any column
        if prev == "(" and i >= 2 and toks[i - 2].string in ("len", "from_pandas") and rest.startswith(")"):
            continue
        if not _FRAME_USE_OK.match(rest):
            return False
        if rest.startswith(".shape") and not rest.startswith(".shape[0"):
            return False
    return True


def narrowed_load(table: str, columns: list[str], path: str) -> str:
    cols = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    sql = f'SELECT {cols} FROM "{table}"'
    return f"execute_sql(sql={sql_text(sql)}, output_path={path!r})\ndf = pd.read_csv({path!r})\n"
