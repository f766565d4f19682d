"""An expert policy without an LLM: it replays a query's reference solution chain as a real multi-turn trajectory.

Turn 1 inspects the data (schema / first rows and missing values); turns 2..k+1 run the chain's hop programs in
order, one hop per turn, each through the same sandbox session as an LLM agent would use; the last turn answers
with what the final hop printed.  Every interpreter message is the real output of that execution.

The cells read as one analyst's session (``cells``): each step keeps its result in a named variable and a
later step uses that variable instead of the printed value pasted back; a database step computes in SQL and
reads its result file into the variable; a step that loads a table into pandas fetches only the columns it
uses.  The thoughts (``narration``) react to what the last output showed - shape, types, gaps, the value
and what it means against the rows it came from - and say what the next step does, without restating the
question.  Where the data or the engine really answers back (a read that fails or looks wrong, SQLite
lacking a median), the trajectory holds the failure, its reading and the way round it.

The N trajectories of a query use N *different* programs for the final hop (the reference solution and
its ``solution_variants``: other libraries or formulations that must print the same answer), so the
self-consistency judge compares independent computations.  When a query has fewer distinct programs than
N, it gets fewer trajectories (see :func:`variant_programs`) - duplicating a program would make the
consistency check a tautology.

In a reflection round the policy adds one cross-check turn that re-computes the final hop with the
reference program and answers with the re-computed value when the two disagree.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

from datamind.agent import protocol
from datamind.agent.loop import PolicyGaveUp, PolicyReply
from datamind.agent.policies import cells, narration
from datamind.data_source import TIDY

OFFLINE_MODEL = "offline-expert"


@dataclass(frozen=True)
class HopProgram:
    question: str
    program: str  # Python (SQL solutions are wrapped into a call of the SQL tool, see ``as_python``)
    hop: int
    description: str = ""  # what the step computes, in the synthesizer's words (its plan; never the question)
    answer: str | None = None  # the step's reference answer: what its cell is expected to print
    sql: str | None = None  # a bare SQL solution (``program`` is then its default cell)


def is_python(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def is_bare_sql(program: str, lang: str | None) -> bool:
    """A database solution written as a bare SQL statement (run through the SQL tool, see ``as_python``)."""
    return (lang or "python") == "sql" and not is_python(program.strip())


def as_python(
    program: str,
    lang: str | None,
    hop: int,
    *,
    name: str | None = None,
    expected: str | None = None,
    import_pandas: bool = True,
) -> str:
    """A runnable cell: Python as is; a bare SQL statement becomes an ``execute_sql`` call whose result file is
    read into ``name`` (default ``result_<hop>``) and printed (see ``cells.sql_cell``)."""
    program = program.strip()
    if not is_bare_sql(program, lang):
        return program
    return cells.sql_cell(program, name or f"result_{hop}", expected, import_pandas=import_pandas)


def variant_programs(row: dict) -> list[str]:
    """The distinct programs of one query that the agent's session can run, reference first.

    Blank and duplicate texts are dropped.  A database query's session offers only the SQL tools (the
    sandbox refuses ``sqlite3`` there, as the agent must not bypass them), so programs that open the
    database directly are not usable variants for it.
    """
    seen: list[str] = []
    sql_session = row.get("data_format") == "sqlite"
    for prog in [row.get("reference_solution"), *(row.get("solution_variants") or [])]:
        if not prog or not prog.strip() or _normalized(prog) in {_normalized(p) for p in seen}:
            continue
        if sql_session and re.search(r"^\s*(import|from)\s+sqlite3\b", prog, re.MULTILINE):
            continue
        seen.append(prog)
    return seen


def localize(program: str, paths: list[str], file_name: str) -> str:
    """Point a program that names the staged file by an absolute path at the session's copy (cwd, base name)."""
    for path in sorted({p for p in paths if p and p != file_name}, key=len, reverse=True):
        program = program.replace(path, file_name)
    return program


def _normalized(program: str) -> str:
    return "\n".join(line.rstrip() for line in program.strip().splitlines() if line.strip())


# What a cell that reads data contains (a SQL statement reads a table only through FROM); conservative: an
# import such as "from math import ..." also counts, so only plain arithmetic on earlier results is data-free.
_TOUCHES_DATA = re.compile(r"\bdf\b|read_|open\(|execute_sql|get_db_info|sqlite3|duckdb|polars|\bfrom\b", re.IGNORECASE)


# The tables a database query reads (a quoted or bare name after FROM / JOIN), for a step that names no column.
_FROM_TABLE = re.compile(r"\b(?:FROM|JOIN)\s+(?:\"([^\"]+)\"|`([^`]+)`|([A-Za-z_]\w*))", re.IGNORECASE)


def _sql_strings(code: str) -> list[str]:
    """The SQL a cell sends through ``execute_sql`` (its ``sql=`` argument, read as the string it is)."""
    out = []
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "execute_sql":
            args = [kw.value for kw in node.keywords if kw.arg == "sql"] + list(node.args[:1])
            for arg in args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.append(arg.value)
                elif isinstance(arg, ast.JoinedStr):
                    out.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values))
    return out


def describe_program(code: str) -> str:
    """A short, honest name for the formulation a program uses (shown in the policy label and the reasoning)."""
    low = code.lower()
    if not _TOUCHES_DATA.search(code):  # e.g. a yes/no check of the previous result against a threshold
        return "arithmetic"
    if "execute_sql" in low:
        sqls = _sql_strings(code)
        if sqls and not any(re.search(r"\bFROM\b", q, re.IGNORECASE) for q in sqls) and "read_csv(" in low:
            if not re.search(r"\bdf\b", code):
                return "sql-constant"  # a SELECT without a table: a comparison of numbers
        pandas_work = re.search(r"\bdf\b|groupby|\.(?:mean|median|std|sum|corr|quantile)\(", code)
        return "sql-tool+pandas" if pandas_work else "sql-tool"
    if "duckdb" in low:
        return "duckdb-sql"
    if "read_sql" in low or "sqlite3" in low:
        return "sqlite-sql" if re.search(r"\bselect\b", low) else "pandas"
    if re.search(r"\bnp\.|numpy", low) and "groupby" not in low:
        return "numpy"
    if "polars" in low:
        return "polars"
    if re.search(r"\bcsv\.|import csv|statistics\.", low):
        return "stdlib"
    return "pandas"


# The first look prints the columns with gaps (none: an empty dict), so a thought can react to them; the
# ways of writing it print the same line.
SHOW_MISSING = 'print("missing values:", {c: int(n) for c, n in df.isna().sum().items() if n})'
SHOW_MISSING_FORMS = (
    SHOW_MISSING,
    'print("missing values:", df.isna().sum()[lambda s: s > 0].to_dict())',
    'print("missing values:", {c: int(df[c].isna().sum()) for c in df.columns if df[c].isna().any()})',
)


def inspect_code(data_format: str, file_name: str, read_kwargs: dict | None, seed: str = "") -> str:
    """The first look an analyst takes: default reading options (only the sheet the task names), so a
    file that needs special handling shows its problem in the output; then shape, types, first rows and the
    gaps per column (written one of a few equivalent ways, chosen by ``seed``)."""
    if data_format == "sqlite":
        return "print(get_db_info())"
    if data_format == "xlsx":
        sheet = (read_kwargs or {}).get("sheet_name")
        sheet_arg = f", sheet_name={sheet!r}" if sheet is not None else ""
        read = f"df = pd.read_excel({file_name!r}{sheet_arg}, engine='calamine')"
    else:
        read = f"df = pd.read_csv({file_name!r})"
    missing = narration.pick(SHOW_MISSING_FORMS, seed, "missing-form") if seed else SHOW_MISSING
    return "import pandas as pd\n" + read + "\n" + SHOW_FRAME + "\n" + missing


SHOW_FRAME = 'print("shape:", df.shape)\nprint(df.dtypes.to_string())\nprint(df.head(3).to_string())'
# A trailing delimiter leaves an empty, unnamed last column: keep the read, drop what is empty and unnamed.
DROP_EMPTY_UNNAMED = (
    "df = df.loc[:, [c for c in df.columns if not (str(c).startswith('Unnamed: ') and df[c].isna().all())]]\n"
    'print("shape:", df.shape)\nprint(list(df.columns))'
)


def without_reading(program: str, fixed_read: str) -> str:
    """``program`` minus the reading block a previous cell already ran (``df`` lives on in the session)."""
    block = fixed_read.split("\n\n", 1)[1] if fixed_read.startswith("import pandas as pd\n\n") else fixed_read
    if block not in program:
        return program
    rest = program.replace(block, "", 1)
    # the cell that read `df` imported pandas as pd, so the session has it
    rest = re.sub(r"^import pandas as pd\n", "", rest, count=1, flags=re.MULTILINE)
    return re.sub(r"\n{3,}", "\n\n", rest).strip() + "\n"


_WARNING = re.compile(r"^\S.*?:\d+: [A-Za-z0-9_]*Warning: ")


def printed_value(output: str) -> str:
    """What a program printed, without Python warning reports (they reach the same stream from stderr)."""
    kept: list[str] = []
    skipping = False
    for line in (output or "").splitlines():
        if _WARNING.match(line):
            skipping = True  # the report's next indented lines quote the offending source
            continue
        if skipping and line.startswith((" ", "\t")):
            continue
        skipping = False
        kept.append(line)
    return "\n".join(kept).strip()


# How a database step's pandas program loads its relation (``Source.python_preamble``).
_RELATION_LOAD = re.compile(r"^execute_sql\(sql=(?:.|\n)*?, output_path='([^']+)'\)\ndf = pd\.read_csv\('\1'\)\n", re.M)


def _body(program: str) -> str:
    """A step's program without the lines that load its data (they name every column of the relation)."""
    program = _RELATION_LOAD.sub("", program)
    return "\n".join(line for line in program.splitlines() if "read_csv(" not in line and "read_excel(" not in line)


_WHOLE_TABLE = re.compile(r'^SELECT \* FROM "((?:[^"]|"")+)"(?P<rest>(?: WHERE .*)?)$', re.DOTALL)
# The lines a program runs to leave a table's aggregate rows out of `df` (idempotent: once per session suffices).
_LEAVE_OUT = re.compile(r"^# leave out the aggregate rows[^\n]*\ndf = df\[~df\[.*\]\.isin\(.*\)\][^\n]*\n", re.M)


def _reuse_relation(hops: list[HopProgram], check: str | None) -> tuple[list[HopProgram], str | None]:
    """A later step that loads the relation an earlier step of the session already loaded into ``df`` works
    on that ``df`` (no step reassigns it) instead of fetching the same rows again."""
    loaded: str | None = None
    out: list[HopProgram] = []
    for h in hops:
        m = _RELATION_LOAD.search(h.program)
        if m and m.group(0) == loaded:
            h = HopProgram(h.question, h.program.replace(loaded, "", 1), h.hop, h.description, h.answer, h.sql)
        elif m:
            loaded = m.group(0)
        out.append(h)
    if check and loaded and loaded in check:
        check = check.replace(loaded, "", 1)
    return out, check


def _narrow_relations(
    hops: list[HopProgram], check: str | None, columns_of: dict[str, list[str]]
) -> tuple[list[HopProgram], str | None]:
    """Steps that load a whole table into pandas (``SELECT * FROM t``) fetch only the columns they use, where
    every step loading that table touches ``df`` only through named columns (a duplicate-row or whole-frame
    operation needs every column, and then the table is fetched whole). ``columns_of``: table -> columns."""
    programs = [h.program for h in hops] + ([check] if check else [])
    loads: dict[str, list[int]] = {}
    for i, prog in enumerate(programs):
        m = _RELATION_LOAD.search(prog)
        if not m:
            continue
        try:
            sql = ast.literal_eval(re.match(r"execute_sql\(sql=((?:.|\n)*?), output_path=", m.group(0)).group(1))
        except (ValueError, SyntaxError, AttributeError):
            continue
        whole = _WHOLE_TABLE.match(sql) if isinstance(sql, str) else None
        if whole:
            loads.setdefault(m.group(0), []).append(i)
    for load, idx in loads.items():
        sql = ast.literal_eval(re.match(r"execute_sql\(sql=((?:.|\n)*?), output_path=", load).group(1))
        whole = _WHOLE_TABLE.match(sql)
        table = whole.group(1).replace('""', '"')
        known = columns_of.get(table) or []
        bodies = [programs[i].replace(load, "", 1) for i in idx]
        used: list[str] = []
        for body in bodies:
            used += [c for c in narration.columns_used(body, known) if c not in used]
        if not known or not used or not all(cells.uses_only_named_columns(b) for b in bodies):
            continue
        used = [c for c in known if c in used]  # in the table's order
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in used)
        query = f'SELECT {cols} FROM "{whole.group(1)}"' + whole.group("rest")
        path = cells.slug(table) + ".csv"
        narrowed = f"execute_sql(sql={cells.sql_text(query)}, output_path={path!r})\ndf = pd.read_csv({path!r})\n"
        for i in idx:
            programs[i] = programs[i].replace(load, narrowed, 1)
    out = [HopProgram(h.question, programs[i], h.hop, h.description, h.answer, h.sql) for i, h in enumerate(hops)]
    return out, (programs[-1] if check else None)


# A whole column parsed into dates and then read through ``.dt`` (``pd.to_datetime(df['day'], ...).dt.year``): on a
# column the first look showed as text, the same step without the parse fails on the accessor.
_PARSED_DATES = re.compile(
    r"pd\.to_datetime\((?P<frame>df\[(?P<q>['\"])(?P<col>(?:(?!(?P=q)).)+)(?P=q)\]), errors='coerce', "
    r"format='mixed'\)(?=\.dt\.)"
)

# One column's mean or median per group, on the session's frame (``df.groupby('g')['m'].mean()``)
_GROUP_STAT = re.compile(
    r"(?P<frame>\bdf)\.groupby\((?P<g>'[^'\n]*'|\"[^\"\n]*\")\)\[(?P<m>'[^'\n]*'|\"[^\"\n]*\")\]\."
    r"(?P<agg>mean|median)\(\)"
)

# A join's tables named with aliases ("city" AS t) and the columns its select list takes through them (t."Name").
_ALIASED_TABLE = re.compile(r'"((?:[^"]|"")+)"\s+AS\s+([A-Za-z_]\w*)\b')
_QUALIFIED_COLUMN = re.compile(r'\b([A-Za-z_]\w*)\."((?:[^"]|"")+)"')
JOIN_PROBE_OUTPUT = "joined.csv"  # where a join probe's rows would go: how its step is told apart

# The SQL aggregates SQLite lacks, which an analyst tries first and pandas then supplies.
_NO_SQLITE_AGGREGATE = {"median": "MEDIAN", "std": "STDEV"}
# what each is called in a thought
_AGGREGATE_WORD = {"MEDIAN": "median", "STDEV": "standard deviation"}


@dataclass
class _Step:
    kind: str  # explore | fix | probe | hop | check
    code: str
    hop: HopProgram | None = None
    index: int = 0  # hop number (1-based) for hop/probe steps
    var: str | None = None  # the variable the step's result is kept in (set when the cell is written)
    kind_of_var: str = "value"  # value | text (see cells.use_variable)
    probe_output: str | None = None  # what a probe printed (its error)
    probe_ok: bool = False
    notes: list[str] = field(default_factory=list)


class OfflineExpertPolicy:
    """Replays ``hops`` (ancestors first, the query itself last) for one variant index.

    The turns are planned up front but written from what each execution printed: a first read with default
    options; a corrected read when that output shows a problem (title rows, unnamed columns, one fused column,
    a decode error); one turn per hop, where a database step that needs a median first asks SQLite for it
    (it has none: the error and the way round it are the trajectory's); the answer.

    A last hop that only asks whether the previous result exceeds ``settle_threshold`` runs no cell: the
    answer turn compares the number the previous step printed with the threshold in words (and the hop runs
    as a cell after all when that output is not a plain number).
    """

    def __init__(
        self,
        *,
        hops: list[HopProgram],
        inspect: str,
        data_format: str,
        file_name: str,
        variant_label: str,
        cross_check: str | None = None,
        fixed_read: str | None = None,
        reuse_first_read: bool = False,
        seed: str = "",
        max_turns: int = 10,
        question: str = "",
        settle_threshold: float | None = None,
        probe_rate: float = 0.5,
    ) -> None:
        if not hops:
            raise ValueError("an offline trajectory needs at least one hop program")
        self.name = f"offline:{variant_label}" + (":cross-check" if cross_check else "")
        self._data_format = data_format
        self._file_name = file_name
        self._seed = seed or variant_label
        self._question = question or hops[-1].question  # read for the names it uses, never quoted
        self._hops = hops
        self._fixed_read = fixed_read
        # the first look (a default read) loads `df` exactly as the steps' reading block does
        self._reuse_first_read = reuse_first_read and fixed_read is not None
        self._cross_check = cross_check
        self._probe_rate = probe_rate
        self._max_turns = max_turns
        self._plan: list[_Step] = [_Step("explore", inspect)]
        self._outputs: list[str] = []
        self._results: list[narration.Result] = []
        self._known: list[str] = []  # column names the latest good read showed
        self._view: narration.ReadView | None = None  # the latest good read of the file
        self._missing: dict[str, int] | None = None
        self._read_problem: str | None = None  # what the first look showed wrong with the read, in words
        self._schema = ""  # what the first look printed
        self._tables: dict[str, narration.DbTable] = {}
        self._cross_checked = cross_check is not None
        self._settle_threshold = settle_threshold if len(hops) > 1 else None
        self._settle_step: _Step | None = None  # the last hop's cell, run only when words cannot settle it
        self._written: list[str] = []  # the cells sent so far, in order
        self._taken: set[str] = set()
        self._by_hop: dict[int, narration.Result] = {}  # each hop's printed result and the variable holding it
        # a join probe's column, its table, the other table that has it, and the table the query starts from
        self._join_clash: tuple[str, str, str, str] | None = None
        self._grouped: tuple[str, str, str, str] | None = None  # a group probe's group, measure, a text column, agg

    # -- planning ---------------------------------------------------------------------------------
    def _budget(self) -> int:
        """Turns left for optional steps: max turns minus explore, hops, cross-check and the answer."""
        fixed = 1 + len(self._hops) + (1 if self._cross_check else 0) + 1
        return self._max_turns - fixed

    def _plan_after_explore(self, obs: Any) -> None:
        output = getattr(obs, "output", "") or ""
        self._schema = printed_value(output)
        view = narration.read_view(output)
        ok = getattr(obs, "ok", False)
        problem = narration.read_problem(view) if self._data_format != "sqlite" else None
        layout = False  # a problem a clean-looking read hides until a step uses the column
        if ok and not problem and self._fixed_read and not self._reuse_first_read and self._data_format != "sqlite":
            # a read that looks clean yet differs from the one every step needs: say what the print shows of it
            problem = narration.layout_problem(view, output, self._fixed_read, self._chain_columns())
            layout = problem is not None
        self._read_problem = problem
        budget = self._budget()
        reads_done = False  # whether `df` in the session is already the frame each step's own read would give
        # An empty column left by a trailing delimiter is dropped from the frame the session holds; a re-read
        # with the options the first look already used would print it again (a fix that changes nothing).
        default_read = not self._fixed_read or self._reuse_first_read
        if ok:
            self._missing = narration.missing_counts(output)
            self._tables = narration.db_tables(self._schema) if self._data_format == "sqlite" else {}
        if ok and problem and default_read and "delimiter" in problem and budget >= 1:
            self._plan.append(_Step("fix", DROP_EMPTY_UNNAMED))
            budget -= 1
            self._known = [n for n in view.names if not n.startswith("Unnamed: ")]
            self._view = view
            reads_done = self._reuse_first_read  # steps drop their read and run on the session's `df`
        elif self._fixed_read and (problem or not ok) and not self._reuse_first_read and budget >= 1:
            # (a reading the first look already made is no fix: announcing one would teach a fix that changes nothing)
            missing = next((f for f in SHOW_MISSING_FORMS if f in self._plan[0].code), SHOW_MISSING)
            probe = self._layout_probe() if layout and budget >= 2 else None
            if probe is not None:
                self._view, self._known = view, view.names
                self._plan.append(_Step("probe", probe, self._hops[0], 1))
                budget -= 1
            self._plan.append(_Step("fix", self._fixed_read.rstrip() + "\n" + SHOW_FRAME + "\n" + missing))
            budget -= 1
            reads_done = True  # the corrected read
        elif not ok:
            kind = getattr(obs, "error_kind", None) or "no_output"
            raise PolicyGaveUp("replay_failed", f"offline step 1 did not run cleanly ({kind})")
        else:
            self._known = view.names
            self._view = view
            reads_done = self._reuse_first_read  # the first look, where it read the way the steps do
        hops, check = self._hops, self._cross_check
        if reads_done:  # later steps build on the session's `df` instead of repeating the read
            hops = [
                HopProgram(
                    h.question, without_reading(h.program, self._fixed_read), h.hop, h.description, h.answer, h.sql
                )
                for h in hops
            ]
            check = without_reading(check, self._fixed_read) if check else None
        if self._data_format == "sqlite":
            columns_of = {t.name: [c for c, _ in t.columns] for t in self._tables.values()}
            hops, check = _narrow_relations(hops, check, columns_of)
            hops, check = _reuse_relation(hops, check)
        if self._settle_threshold is not None:
            self._settle_step = _Step("hop", hops[-1].program, hops[-1], len(hops))
            hops, check = hops[:-1], None
        for i, h in enumerate(hops, start=1):
            probe = self._probe_for(h) if budget >= 1 else None
            if probe is not None:
                self._plan.append(_Step("probe", probe, h, i))
                budget -= 1
            self._plan.append(_Step("hop", h.program, h, i))
        if check:
            self._plan.append(_Step("check", check, hops[-1], len(hops)))

    def _probe_for(self, h: HopProgram) -> str | None:
        """What an analyst tries first, on some trajectories, where the data or the engine then refuses it: for a
        database step that loads one table into pandas only to take a median, that median in SQL (SQLite has
        none); for a file step that parses a column the first look showed as text into dates, the column's
        ``.dt`` accessor as the column stands (text has none)."""
        if self._data_format != "sqlite":
            return self._date_probe_for(h) or self._group_probe_for(h)
        if h.sql is not None:
            return self._join_probe_for(h)
        m = re.search(r"execute_sql\(sql=((?:.|\n)*?), output_path='[^']+'\)\ndf = pd\.read_csv", h.program)
        med = re.search(r"df\[(['\"])(.+?)\1\]\.(median|std)\(\)", h.program)
        if not m or not med or not narration.chance(self._seed, f"probe-{h.hop}", self._probe_rate):
            return None
        try:
            sql = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            return None
        body = h.program[m.end() :]
        if re.search(r"\bdf\s*=|\.loc\[|df\[df|groupby|dropna|drop_duplicates", body):
            return None  # the statistic of a filtered or grouped frame is more than one aggregate
        table = re.match(r'^SELECT .+? FROM ("(?:[^"]|"")+")(?P<rest>(?: WHERE .*)?)$', sql, re.DOTALL)
        if not table:
            return None
        column = med.group(2).replace('"', '""')
        func = _NO_SQLITE_AGGREGATE[med.group(3)]
        query = f'SELECT {func}("{column}") FROM {table.group(1)}{table.group("rest")}'
        return f"execute_sql(sql={cells.sql_text(query)}, output_path='{med.group(3)}.csv')"

    def _layout_probe(self) -> str | None:
        """On some trajectories, the first step run on the frame the first look loaded, before the read is
        corrected: a column whose numbers came out as text refuses the arithmetic (TypeError), a name with spaces
        around it is not found (KeyError). Only where the step is sure to fail that way."""
        h = self._hops[0]
        if not self._fixed_read or not narration.chance(self._seed, f"layout-{h.hop}", self._probe_rate):
            return None
        body = without_reading(h.program, self._fixed_read)
        if body == h.program:
            return None
        problem = self._read_problem or ""
        named = re.match(r"`(.+?)` came out as text", problem)
        if named:  # text refuses these; a sum would concatenate, a maximum compare as text
            col = re.escape(repr(named.group(1)))
            numeric = rf"df\[{col}\]\.(?:mean|median|std|var|quantile|skew)\(|df\[{col}\]\s*[<>]=?\s*[-\d]"
            return body if re.search(numeric, body) else None
        spaced = re.search(r"so `df\[(.+?)\]` would not find it", problem)
        return body if spaced and f"df[{spaced.group(1)}]" in body else None

    def _join_probe_for(self, h: HopProgram) -> str | None:
        """A join whose select list takes a column by its bare name where both tables have one: the first thing
        an analyst writes, which SQLite refuses as ambiguous (the schema print showed both columns). Only for a
        first step, whose SQL holds no value an earlier step printed."""
        if h.hop != 1 or h.sql is None or not re.search(r"\bJOIN\b", h.sql, re.IGNORECASE):
            return None
        aliases = {alias: table.replace('""', '"') for table, alias in _ALIASED_TABLE.findall(h.sql)}
        select = re.search(r"\bSELECT\s+(?P<cols>.+?)\s+FROM\s", h.sql, re.DOTALL)
        if len(set(aliases.values())) < 2 or not select:
            return None
        columns_of = {t.name: {c for c, _ in t.columns} for t in self._tables.values()}
        joined = set(aliases.values())
        for alias, column in _QUALIFIED_COLUMN.findall(select.group("cols")):
            column = column.replace('""', '"')
            others = sorted(t for t in joined if t != aliases.get(alias) and column in columns_of.get(t, ()))
            if alias in aliases and others:
                break
        else:
            return None
        if not narration.chance(self._seed, f"probe-{h.hop}", self._probe_rate):
            return None
        bare = _QUALIFIED_COLUMN.sub(
            lambda m: f'"{m.group(2)}"' if m.group(1) in aliases else m.group(0), select.group("cols")
        )
        sql = h.sql[: select.start("cols")] + bare + h.sql[select.end("cols") :]
        child = next(iter(aliases.values()))  # the FROM table comes first; the parents are joined to it
        self._join_clash = (column, aliases[alias], others[0], child)
        return f"execute_sql(sql={cells.sql_text(sql)}, output_path='{JOIN_PROBE_OUTPUT}')"

    def _group_probe_for(self, h: HopProgram) -> str | None:
        """A first step that averages one column per group (``df.groupby('g')['m'].mean()``), tried the way an
        analyst often types it first: the whole frame's means, then the column (``df.groupby('g').mean()['m']``).
        Where the first look showed a text column besides the group, pandas refuses to average it."""
        m = _GROUP_STAT.search(h.program)
        if not m or h.hop != 1 or self._view is None:
            return None
        group = ast.literal_eval(m.group("g"))
        text = [n for n, d in self._view.columns if n != group and narration.is_text_dtype(d)]
        if not text or not narration.chance(self._seed, f"probe-{h.hop}", self._probe_rate):
            return None
        self._grouped = (group, ast.literal_eval(m.group("m")), text[0], m.group("agg"))
        whole = f"{m.group('frame')}.groupby({m.group('g')}).{m.group('agg')}()[{m.group('m')}]"
        return h.program[: m.start()] + whole + h.program[m.end() :]

    def _date_probe_for(self, h: HopProgram) -> str | None:
        m = _PARSED_DATES.search(h.program)
        # (a first step only: a later step's program holds the previous printed values, which its cell replaces
        # by the variables that hold them)
        if not m or h.hop != 1 or self._view is None:
            return None
        if not narration.chance(self._seed, f"probe-{h.hop}", self._probe_rate):
            return None
        dtype = dict(self._view.columns).get(m.group("col").replace("\\'", "'"))
        if dtype is None or not narration.is_text_dtype(dtype):
            return None  # a column read as dates has the accessor: nothing would fail
        return h.program[: m.start()] + m.group("frame") + h.program[m.end() :]

    def _names_in_schema(self) -> list[str]:
        """Column names a database schema print showed (quoted or bare identifiers on its lines)."""
        if self._tables:
            return list(dict.fromkeys(c for t in self._tables.values() for c, _ in t.columns))
        names = re.findall(
            r"[\"`']?([A-Za-z_][\w ]{1,40}?)[\"`']?\s+(?:INTEGER|TEXT|REAL|NUMERIC|VARCHAR|INT|"
            r"FLOAT|DOUBLE|DATE|DATETIME|BOOLEAN|CHAR|DECIMAL|BIGINT)",
            self._schema,
            re.IGNORECASE,
        )
        return list(dict.fromkeys(n.strip() for n in names))

    # -- writing the cells ------------------------------------------------------------------------
    def _write(self, step: _Step) -> str:
        """The cell of a hop or check step as this session writes it: the result kept in a named variable,
        the previous step's result used through its variable, lines the session already ran left out."""
        h = step.hop
        assert h is not None
        columns = self._known or self._names_in_schema()
        used = narration.columns_used(_body(h.program), columns)
        prev = self._by_hop.get(step.index - 1)  # the value this step builds on
        if step.kind == "check" and step.index in self._by_hop and self._by_hop[step.index].var:
            base = f"{self._by_hop[step.index].var}_check"
        else:
            base = cells.variable_name(h.description, h.sql or h.program, used, h.answer or "", self._taken)
        pandas_ready = any(re.search(r"^import pandas as pd$", c, re.M) for c in self._written)
        if h.sql is not None and step.kind == "hop":
            code = cells.sql_cell(h.sql, base, h.answer, import_pandas=not pandas_ready)
            step.kind_of_var = "value" if "dtype=str" not in code else "text"
        else:
            code = step.code
            if pandas_ready:
                code = re.sub(r"^import pandas as pd\n+", "", code, count=1)
            code = cells.scalar_tail(code, base, h.answer if step.kind == "hop" else None)
            if cells.result_name(code) == "answer":
                code = cells.rename_result(code, base)
        for earlier in self._written:  # lines that leave out aggregate rows already ran on this session's df
            for m in _LEAVE_OUT.finditer(earlier):
                code = code.replace(m.group(0), "", 1)
        # (idempotent: once per session. Never judged needless from the print: a name's trailing space is invisible
        # in it, and 48 shared-data trajectories failed on one)
        if TIDY in code and any(TIDY in c for c in self._written):
            code = code.replace(TIDY, "", 1).lstrip("\n")
        if prev is not None and prev.var:
            code = cells.use_variable(code, prev.value, prev.var, prev.kind_of_var, columns)
        step.var = cells.result_name(code)
        if step.var:
            self._taken.add(step.var)
        return code.strip() + "\n"

    # -- narration --------------------------------------------------------------------------------
    def _chain_columns(self) -> list[str]:
        """The columns the whole chain names (string literals of its programs that the question also uses)."""
        found: list[str] = []
        for h in self._hops:
            texts: list[str] = []
            try:
                texts = [n.value for n in ast.walk(ast.parse(h.program)) if isinstance(n, ast.Constant)]
            except (SyntaxError, ValueError):
                pass
            texts = [t for t in texts if isinstance(t, str)]
            code = h.program + "\n" + (h.sql or "")
            for t in [*texts, h.sql or ""]:
                for name in re.findall(r'"((?:[^"]|"")+)"', t) + [t]:
                    name = name.replace('""', '"')
                    if not (1 < len(name) <= 60 and name in self._question and "\n" not in name) or name in found:
                        continue
                    if re.fullmatch(r"[\d.,\s-]+", name):
                        continue
                    q = re.escape(name)
                    as_column = re.search(
                        rf"\[\s*['\"]{q}['\"]|groupby\(\s*['\"]{q}['\"]|subset=\[[^\]]*['\"]{q}['\"]", code
                    ) or re.search(rf'"{re.escape(name.replace(chr(34), chr(34) * 2))}"', code)
                    if as_column:
                        found.append(name)
        # tables and sheets are named in the programs too; they are where the columns are, not columns
        sheets = re.findall(
            r"sheet_name=['\"]([^'\"]+)['\"]", self._plan[0].code + "".join(h.program for h in self._hops)
        )
        return [n for n in found if n not in self._chain_tables() and n not in sheets and n != self._file_name]

    def _chain_tables(self) -> list[str]:
        tables: list[str] = []
        for h in self._hops:
            for t in (h.sql or "", *self._strings(h.program)):
                named = set(re.findall(r"\b(\w+)\s+AS\s*\(", t, re.IGNORECASE))
                for m in _FROM_TABLE.findall(t):
                    name = "".join(m)
                    if name not in named and name not in ("df", "t", "r") and name not in tables:
                        tables.append(name)
        return tables

    @staticmethod
    def _strings(program: str) -> list[str]:
        try:
            return [
                n.value
                for n in ast.walk(ast.parse(program))
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
        except (SyntaxError, ValueError):
            return []

    def _think_explore(self) -> str:
        f, seed = self._file_name, self._seed
        cols = self._chain_columns()[:3]
        named = narration.name_list(cols, 3) if cols else None
        k = len(self._hops)
        first = narration.plan_text(self._hops[0].description, seed=seed)
        last = narration.plan_text(self._hops[-1].description, seed=seed) if k > 1 else None
        steps = {2: "two", 3: "three", 4: "four", 5: "five"}.get(k, str(k))
        plan = ""
        if first and last:
            plan = narration.pick(
                (
                    f"{narration.cap_word(steps)} steps: first {first}, and in the end {last}. ",
                    f"It takes {steps} steps: I {first}, and finally {last}. ",
                    f"The chain is {steps} steps long. It starts when I {first} and ends when I {last}. ",
                ),
                seed,
                "plan",
            )
        elif first:
            plan = narration.pick(
                (f"The plan: {first}. ", f"One step: {first}. ", f"I need to {first}. "), seed, "plan"
            )
        if self._data_format == "sqlite":
            tables = self._chain_tables()
            where = f"the {narration.name_list(tables, 2)} table{'s' if len(tables) > 1 else ''}" if tables else None
            options = [
                plan
                + f"{f} is a SQLite database I have not seen, so first its tables, column types and keys"
                + (f", to see how {where} {'are' if len(tables) > 1 else 'is'} laid out" if where else "")
                + ".",
                f"No SQL until I know the schema of {f}: "
                + (f"where {named} {'lives' if len(cols) == 1 else 'live'}, " if named else "")
                + "how the tables link, and how many rows each has. "
                + plan.strip(),
                (f"The work needs {named}" + (f" from {where}" if where else "") if named else f"The work is on {f}")
                + f"; get_db_info() first, so every query uses real names. {plan.strip()}",
            ]
            return narration.pick(options, seed, "explore").strip()
        sheet = ""
        m = re.search(r"sheet_name=('[^']*'|\"[^\"]*\")", self._plan[0].code)
        if m:
            sheet = f" (sheet {m.group(1)})"
        options = [
            (
                f"{f}{sheet} is new to me, and the work rests on {named}: a plain read first shows whether "
                + (
                    "it exists under that name and whether it is"
                    if len(cols) == 1
                    else "they exist under these names and whether they are"
                )
                + " numbers or text. "
                if named
                else f"{f}{sheet} is new to me, so a plain read first: its columns, their types and a few rows. "
            )
            + plan.strip(),
            plan + f"Start with the raw file: {f}{sheet} with pandas' defaults, its shape, dtypes, a few rows and "
            "the gaps" + (f" in {named}" if named else "") + ".",
        ]
        if named:
            options.append(
                f"{named} {'is' if len(cols) == 1 else 'are'} what the analysis needs"
                + (f" over {steps} steps" if k > 1 else "")
                + f", so I load {f}{sheet} as it is and check {'its type' if len(cols) == 1 else 'their types'} and "
                "missing values before computing anything." + (f" First up: {first}." if first else "")
            )
        return narration.pick(options, seed, "explore").strip()

    def _think_fix(self, problem: str | None, error: str | None, code: str | None = None) -> str:
        how = narration.describe_fix(code or self._fixed_read or "")
        seen = problem or (f"the read failed ({error})" if error else "the first read does not look like a clean table")
        cols = self._chain_columns()[:2]
        return self._fix_sentence(seen, how, code, narration.name_list(cols) if cols else None)

    def _fix_sentence(self, seen: str, how: str, code: str | None, cols: str | None) -> str:
        one = cols is not None and " and " not in cols
        need = (
            (f" {cols} {'has to come out as a real column' if one else 'have to come out as real columns'}")
            if cols
            else ""
        )
        if code == DROP_EMPTY_UNNAMED:
            return narration.pick(
                (
                    f"In that output {seen}. It carries nothing, so I drop empty unnamed columns and list the ones "
                    "that remain" + (f"; {cols} stay as they are." if cols else "."),
                    f"Looking at the columns, {seen}. The data itself reads fine"
                    + (f" ({cols} included)" if cols else "")
                    + "; I only remove columns that are unnamed and empty.",
                ),
                self._seed,
                "fix",
            )
        return narration.pick(
            (
                f"The output shows a problem ({seen}), so I read it again with {how}"
                + (f", and{need}." if cols else " and check the structure."),
                f"Looking at that output, {seen}; a second read needs {how}"
                + (f", after which{need}." if cols else "."),
                f"Not usable yet, since {seen}; reading it again with {how} should give a proper table"
                + (f" in which{need}." if cols else "."),
            ),
            self._seed,
            "fix",
        )

    def _dtype_of(self, column: str) -> str | None:
        if self._view is not None:
            for name, dtype in self._view.columns:
                if name == column:
                    return dtype
        for t in self._tables.values():
            for name, dtype in t.columns:
                if name == column:
                    return dtype
        return None

    def _rows_for(self, program: str) -> int | None:
        """Records of the relation a step works over: the frame's rows, or the table's row count."""
        if self._data_format != "sqlite":
            return self._view.shape[0] if self._view and self._view.shape else None
        tables = [t for t in self._chain_tables() if t in self._tables]
        own = [t for t in dict.fromkeys("".join(m) for m in _FROM_TABLE.findall(program)) if t in self._tables]
        for name in own or tables:
            return self._tables[name].rows
        return None

    def _facts(self, cols: list[str]) -> str:
        """What the first look showed about the columns a step needs: rows, types, gaps (or a table's row
        count, types and keys)."""
        parts: list[str] = []
        if self._data_format == "sqlite":
            tables = [t for t in self._chain_tables() if t in self._tables]
            for name in tables[:2]:
                t = self._tables[name]
                typed = [f"`{c}` {d}" for c, d in t.columns if c in cols][:3]
                parts.append(f"table {name} has {t.rows} rows" + (f" ({', '.join(typed)})" if typed else ""))
            return "; ".join(parts)
        view = self._view
        if view and view.shape:
            parts.append(f"{view.shape[0]} rows and {view.shape[1]} columns")
        typed = [(c, self._dtype_of(c)) for c in cols]
        typed = [(c, d) for c, d in typed if d]
        if typed:
            parts.append(", ".join(f"`{c}` is {narration.kind_word(d)}" for c, d in typed[:3]))
        if self._missing is not None:
            gaps = [(c, n) for c, n in self._missing.items() if c in cols]
            if gaps:
                parts.append(", ".join(f"`{c}` has {n} missing" for c, n in gaps[:2]))
            elif cols:
                parts.append("no empty cells in " + ("it" if len(cols) == 1 else "those"))
        return "; ".join(parts)

    def _consequence(self, step: _Step, cols: list[str]) -> str | None:
        """What the first look changes for the step: text that must become numbers or dates, gaps, totals."""
        code = step.code
        for c in cols:
            d = self._dtype_of(c)
            if d and narration.is_text_dtype(d) and re.search(r"to_datetime|\.dt\.|julianday|strftime", code):
                return f"`{c}` holds dates as text, so they have to be parsed first"
            if d and narration.is_text_dtype(d) and re.search(r"to_numeric|astype\(float\)", code):
                return f"`{c}` came out as text although it holds numbers, so it is converted first"
        if TIDY in code:
            unnamed = narration.placeholder_headers(self._view.names) if self._view else []
            if unnamed:
                return narration.pick(
                    (
                        f"columns such as `{unnamed[0]}` hold nothing, so the empty unnamed columns go, and names and "
                        "text cells are trimmed while I am at it",
                        f"the empty `{unnamed[0]}`-style columns are dropped first, with the names and text cells "
                        "trimmed",
                    ),
                    self._seed,
                    "tidy",
                )
            col = f"`{cols[0]}`" if cols else "the columns"  # (the step's own column: a reason about this data)
            return narration.pick(
                (
                    f"stray spaces around {col} or its values would not show in a print, so names and text cells "
                    "are trimmed first (empty text counts as missing)",
                    f"{col} is only used once stray spaces are trimmed from the names and text cells",
                    f"a trailing space in a name or a label would keep {col} from matching, so names and text "
                    "cells are trimmed first",
                    f"before {col} is touched, names and text cells are trimmed: a print hides stray spaces",
                    f"names and text cells are trimmed ahead of using {col}, since stray spaces do not show in "
                    "that output",
                ),
                self._seed,
                "tidy",
            )
        if _LEAVE_OUT.search(code):
            m = re.search(r"df\[~df\[(['\"])(.+?)\1\]\.isin\((\[.*?\])\)\]", code)
            if m:
                return (
                    f"some rows are totals of other rows ({narration.short(m.group(3), 60)} in `{m.group(2)}`), "
                    "so they go before anything is counted or averaged"
                )
        gaps = [c for c in cols if self._missing and self._missing.get(c)]
        if gaps and re.search(r"dropna|notna|IS NOT NULL", code):
            return f"the missing `{gaps[0]}` values are left out explicitly"
        if gaps:
            return f"the aggregate skips the missing `{gaps[0]}` values"
        return None

    def _result_of(self, step: _Step, value: str) -> narration.Result:
        h = step.hop
        code = self._written[-1] if self._written else step.code
        columns = self._known or self._names_in_schema()
        # what the step computes, from its own plan and program: the cell as written holds the session's names
        # for earlier values (`avg_percentage`), which say nothing about this one
        what = cells.step_text(h.description, h.sql or h.program, columns) if h else cells.step_text("", code, columns)
        used = narration.columns_used(_body(h.program if h else code), columns)
        column = cells.subject_column(h.description if h else "", code, used, value) if used else None
        return narration.Result(value, step.var, what, self._rows_for(code), column, step.kind_of_var)

    def _think_hop(self, step: _Step) -> str:
        h = step.hop
        assert h is not None
        seed = f"{self._seed}-{step.index}"
        columns = self._known or self._names_in_schema()
        cols = narration.columns_used(_body(h.program), columns)
        prev = self._by_hop.get(step.index - 1)
        plan = narration.plan_text(h.description, prev.var if prev else None, seed)
        code = step.code
        via_var = prev is not None and prev.var and re.search(rf"\b{re.escape(prev.var)}\b", code) is not None
        form = describe_program(code)
        how = narration.pick(narration.FORMULATION.get(form, ("compute it",)), self._seed, f"form-{step.index}")
        doing = plan or how
        keep = ""  # (a clause of the action's sentence: a thought stays at two or three sentences)
        if step.var:
            keep = narration.pick(
                (f", kept as `{step.var}`", f"; the result goes into `{step.var}`", f" - `{step.var}` will hold it"),
                seed,
                "keep",
            )
        joins = narration.join_reasons(code, self._seed, f"j-{step.index}", again=self._joined_before(step))
        at = next(i for i, st in enumerate(self._plan) if st is step)
        probe = self._plan[at - 1] if at > 0 else None
        if probe is not None and probe.kind == "probe":
            return self._think_after_probe(probe, step, cols, doing)
        if prev is None:  # the first step: react to what the first look showed
            facts = self._facts(cols)
            why = self._consequence(step, cols)
            lead = narration.pick(
                (
                    f"The read looks right: {facts}." if facts else "The data reads cleanly.",
                    f"{narration.cap(facts)}." if facts else "The table is in shape.",
                    f"Good, {facts}." if facts else "Good, the structure is clear.",
                ),
                seed,
                "lead",
            )
            if why:
                lead += f" {narration.cap_word(why)}."  # (it starts with our own words or a `name`)
            if joins:
                lead += f" {narration.cap(joins[0])}."
            action = narration.pick((f"Now: {doing}", f"First computation: {doing}", f"So, {doing}"), seed, "act")
            return f"{lead} {action}{keep}."
        reaction = narration.cap(self._react(prev, self._by_hop.get(step.index - 2), seed, "prev"))
        use = ""
        if via_var and f"`{prev.var}`" not in reaction and f"`{prev.var}`" not in doing:
            use = narration.pick(
                (
                    f" The next cell uses `{prev.var}` itself, not the printed text.",
                    f" `{prev.var}` goes straight into the next cell.",
                    "",
                ),
                seed,
                "use",
            )
        action = narration.pick((f"Next: {doing}", f"Now {doing}", f"With that, {doing}"), seed, "act")
        extra = f" {narration.cap(joins[0])}." if joins else ""
        return f"{reaction}.{use}{extra} {action}{keep}."

    def _joined_before(self, step: _Step) -> bool:
        """Whether an earlier step's thought already said why the session joins (the same join, same reason)."""
        for st in self._plan:
            if st is step:
                return False
            if st.kind == "hop" and narration.join_reasons(st.code, self._seed, "x"):
                return True
        return False

    def _think_probe(self, step: _Step) -> str:
        h = step.hop
        assert h is not None
        if self._plan[self._plan.index(step) + 1].kind == "fix":  # a layout probe: the first step, tried as read
            view = self._view
            shape = f"{view.shape[0]} rows and {view.shape[1]} columns" if view and view.shape else "The table loaded"
            doing = narration.plan_text(h.description, None, f"{self._seed}-probe") or "compute the first step"
            return narration.pick(
                (f"{narration.cap(shape)}. First computation: {doing}.", f"{narration.cap(shape)}; so, {doing}."),
                self._seed,
                f"probe-{step.index}",
            )
        dates = re.search(r"df\[(['\"])(.+?)\1\]\.dt\.", step.code) if self._data_format != "sqlite" else None
        if dates:
            prev = self._by_hop.get(step.index - 1)
            lead = narration.cap(narration.react(prev, f"{self._seed}-{step.index}", "prev")) + ". " if prev else ""
            col = dates.group(2)
            return lead + narration.pick(
                (
                    f"The dates in `{col}` should give this through the `.dt` accessor, as the column stands.",
                    f"I read the calendar parts straight off `{col}` with `.dt`.",
                ),
                self._seed,
                f"probe-{step.index}",
            )
        if self._grouped is not None and f".{self._grouped[3]}()[" in step.code:
            group, measure, _, agg = self._grouped
            facts = self._facts([measure])
            lead = f"{narration.cap(facts)}. " if facts else ""
            word = "means" if agg == "mean" else "medians"
            return lead + narration.pick(
                (
                    f"Group by `{group}`, take the {word}, and read `{measure}` off the result.",
                    f"The per-`{group}` {word} give this; `{measure}` is the column to look at.",
                ),
                self._seed,
                f"probe-{step.index}",
            )
        if JOIN_PROBE_OUTPUT in step.code and self._join_clash:
            column, _, _, child = self._join_clash
            parents = " and ".join(sorted({t for t in self._join_clash[1:3] if t != child}))
            facts = self._facts([column])
            lead = f"{narration.cap(facts)}. " if facts else ""
            # why the join, from the step's own program (the probe's bare names hide which column it brings)
            joins = narration.join_reasons(step.hop.program, self._seed, f"j-{step.index}") if step.hop else []
            why = f" {narration.cap(joins[0])}." if joins else ""
            return (
                lead
                + narration.pick(
                    (
                        f"I join {child} to {parents} and take the columns I need by name, `{column}` among them.",
                        f"One query does it: {child} joined to {parents}, the columns listed by their names.",
                    ),
                    self._seed,
                    f"probe-{step.index}",
                )
                + why
            )
        med = re.search(r"(MEDIAN|STDEV)\(\"(.+?)\"\)", step.code)
        col = med.group(2) if med else "the column"
        word = _AGGREGATE_WORD[med.group(1)] if med else "median"
        prev = self._by_hop.get(step.index - 1)
        lead = ""
        if prev is not None:
            lead = narration.react(prev, f"{self._seed}-{step.index}", "prev")
            lead = narration.cap(lead) + ". "
        else:
            facts = self._facts([col])
            lead = f"{narration.cap(facts)}. " if facts else ""
        return lead + narration.pick(
            (
                f"The {word} of `{col}` is one aggregate, so I ask the database for it directly.",
                f"I try the {word} of `{col}` in SQL first; no need to pull rows for one number.",
            ),
            self._seed,
            f"probe-{step.index}",
        )

    def _think_after_probe(self, probe: _Step, step: _Step, cols: list[str], doing: str) -> str:
        dates = re.search(r"df\[(['\"])(.+?)\1\]\.dt\.", probe.code) if self._data_format != "sqlite" else None
        if JOIN_PROBE_OUTPUT in probe.code and self._join_clash:
            return self._think_after_join_probe(probe, step, doing)
        if self._grouped is not None and f".{self._grouped[3]}()[" in probe.code:
            group, measure, text, agg = self._grouped
            keep = f"; `{step.var}` keeps the result" if step.var else ""
            if probe.probe_ok:  # a pandas that skips text columns by itself
                return f"That ran; to be explicit the step takes `{measure}` before the {agg}{keep}."
            error = narration.read_view(probe.probe_output or "").error or "an error"
            return narration.pick(
                (
                    f"That fails ({error}): the frame still holds text columns such as `{text}`, and pandas will "
                    f"not take their {agg}. Selecting `{measure}` first leaves only the column asked about{keep}.",
                    f"{error}: the {agg} ran over every column, text ones like `{text}` included. Picking "
                    f"`{measure}` before the {agg} is the fix{keep}.",
                ),
                self._seed,
                f"after-probe-{step.index}",
            )
        if probe.probe_ok:
            engine = "The column" if dates else "SQLite"
            return f"{engine} answered {narration.short(probe.probe_output or '', 40)}; {doing} in pandas as a check."
        error = narration.read_view(probe.probe_output or "").error or "an error"

        def kept(lead: str) -> str:  # where the recovered value goes, when the step keeps one
            return f"{lead} `{step.var}`." if step.var else "."

        if dates:
            col = f"`{dates.group(2)}`"
            options = (
                f"That fails ({error}): {col} was read as text, not as dates, so it is parsed with "
                "pd.to_datetime first" + kept(", the result kept in"),
                f"{col} holds its dates as text ({error}). Parsing it with pd.to_datetime is the way round"
                + kept("; the result goes into"),
            )
        else:
            col = f"`{cols[0]}`" if cols else "the column"
            func = next((f for f in _AGGREGATE_WORD if f"{f}(" in probe.code), "MEDIAN")
            word = _AGGREGATE_WORD[func]
            options = (
                f"The database refuses it ({error}): this SQLite has no {word} aggregate. So I fetch {col} and take "
                f"the {word} in pandas" + kept(", keeping it in"),
                f"No {func} in SQLite for {col} ({error}). Pulling the column into pandas is the simple way round"
                + kept("; the result goes into"),
            )
        return narration.pick(options, self._seed, f"after-probe-{step.index}")

    def _think_after_join_probe(self, probe: _Step, step: _Step, doing: str) -> str:
        assert self._join_clash is not None
        column, table, other, _ = self._join_clash
        keep = f", and `{step.var}` keeps the result" if step.var else ""
        if probe.probe_ok:  # an engine that picked a column for the bare name: the step names it all the same
            named = f"so `{column}` is {table}'s{keep}"
            return f"SQLite took the bare names; {doing} with each column's table named, {named}."
        error = narration.read_view(probe.probe_output or "").error or "an error"
        joins = narration.join_reasons(step.code, self._seed, f"j-{step.index}", again=True)
        why = f" {narration.cap(joins[0])}." if joins else ""
        options = (
            f"SQLite refuses it ({error}): {table} and {other} both have a `{column}` column, so the bare name "
            f"does not say which. Each column now goes through its table's alias, `{column}` from {table}{keep}.",
            f"Ambiguous: `{column}` is a column of both {table} and {other} ({error}). Naming the table of every "
            f"column fixes that; {doing}{keep}.",
        )
        return narration.pick(options, self._seed, f"after-probe-{step.index}") + why

    @staticmethod
    def _react(r: narration.Result, before: narration.Result | None, seed: str, salt: str) -> str:
        """The reaction to a printed result, with what it says about the data against the result before it."""
        reaction = narration.react(r, seed, salt)
        note = narration.skew_note(before, r)
        return f"{reaction}; {note}" if note else reaction

    def _settled(self) -> str | None:
        """Yes/No for the last hop, from the number the previous step printed; None when it printed more."""
        try:
            value = float(self._outputs[-1])
        except (IndexError, ValueError):
            return None
        if not math.isfinite(value):
            return None
        return "Yes" if value > self._settle_threshold else "No"

    def _think_settled(self, verdict: str) -> str:
        prev = narration.short(self._outputs[-1], 40)
        compared = f"{prev} is {'above' if verdict == 'Yes' else 'not above'} {self._settle_threshold:g}"
        r = self._results[-1] if self._results else None
        before = self._results[-2] if len(self._results) > 1 else None
        reaction = narration.cap(self._react(r, before, self._seed, "settle-r") if r else prev)
        return narration.pick(
            (
                f"{reaction}. That settles it without more code: {compared}, so {verdict}.",
                f"{reaction}. The last step only compares it with {self._settle_threshold:g}: {compared}; {verdict}.",
                f"{reaction}, and {compared}: {verdict}.",
            ),
            self._seed,
            "settled",
        )

    def _think_answer(self, answer: str) -> str:
        r = self._results[-1] if self._results else narration.Result(answer, None, "", None, None)
        before = self._results[-2] if len(self._results) > 1 else None
        reaction = narration.cap(narration.react(r, self._seed, "final"))
        a = narration.short(answer, 100)
        var = f"`{r.var}`" if r.var else None
        note = narration.skew_note(before, r)
        if note:  # the reading of the data comes before the value reported, so "that" cannot point at the median
            return f"{reaction}; {note}. Still, the gap itself is what I report: {var or a}."
        if var and var in reaction:
            return narration.pick(
                (f"{reaction}; nothing is left to compute.", f"{reaction}, and that is the answer.", f"{reaction}."),
                self._seed,
                "answer",
            )
        options = [f"{reaction}. That is the answer: {a}." if a not in reaction else f"{reaction}: that is the answer."]
        if var:
            options += [f"{reaction}. {var} is the value to report.", f"{reaction}, so I report {var}."]
        return narration.pick(options, self._seed, "answer")

    # -- the loop ---------------------------------------------------------------------------------
    async def next_turn(self, messages: list[dict], last_observation: Any | None) -> PolicyReply:
        step_no = sum(1 for m in messages if m["role"] == "assistant")
        if step_no == 1:
            self._plan_after_explore(last_observation)
        elif step_no > 1:
            done = self._plan[step_no - 1]
            ok = last_observation is not None and getattr(last_observation, "ok", False)
            if done.kind == "probe":
                done.probe_ok = ok
                done.probe_output = printed_value(getattr(last_observation, "output", "") or "")
            elif not ok:
                kind = getattr(last_observation, "error_kind", None) or "no_output"
                raise PolicyGaveUp("replay_failed", f"offline step {step_no} did not run cleanly ({kind})")
            elif done.kind == "fix":
                view = narration.read_view(last_observation.output)
                self._known = view.names
                self._view = view if view.shape else self._view
                missing = narration.missing_counts(last_observation.output)
                self._missing = missing if missing is not None else self._missing
            else:
                value = printed_value(last_observation.output)
                self._outputs.append(value)
                result = self._result_of(done, value)
                self._results.append(result)
                if done.kind == "hop":
                    self._by_hop[done.index] = result
        if step_no == len(self._plan) and self._settle_step is not None:
            verdict = self._settled()
            if verdict is not None:
                return PolicyReply(
                    protocol.format_answer_turn(self._think_settled(verdict), verdict), model=OFFLINE_MODEL
                )
            self._plan.append(self._settle_step)  # the previous step printed more than a number: run the check
            self._settle_step = None
        if step_no < len(self._plan):
            step = self._plan[step_no]
            if step.kind == "explore":
                think, code = self._think_explore(), step.code
            elif step.kind == "fix":
                view = narration.read_view(getattr(last_observation, "output", "") or "")
                think, code = self._think_fix(self._read_problem, view.error, step.code), step.code
                if self._plan[step_no - 1].kind == "probe" and view.error:  # the data refused the first step
                    think = f"That failed with {narration.short(view.error, 100)}. " + think.lstrip()
            elif step.kind == "probe":
                think, code = self._think_probe(step), step.code
            elif step.kind == "check":
                step.code = code = self._write(step)
                think = narration.pick(
                    (
                        "Before answering I recompute the final value with an independent formulation, "
                        "so the result does not hinge on one way of writing it.",
                        f"A second, independent computation of the last step guards against a slip in "
                        f"{describe_program(self._written[-1] if self._written else code)}.",
                        "I cross-check the final number with another formulation before reporting it.",
                    ),
                    self._seed,
                    "check",
                )
            else:
                step.code = code = self._write(step)
                think = self._think_hop(step)
            self._written.append(code)
            return PolicyReply(protocol.format_code_turn(think, code), model=OFFLINE_MODEL)
        if step_no > len(self._plan) or not self._outputs:
            raise PolicyGaveUp("replay_exhausted", "offline policy has no further turns")
        answer = self._outputs[-1]
        if not answer:
            raise PolicyGaveUp("empty_output", "the final program printed nothing")
        if self._cross_checked:
            first = self._outputs[-2]
            if first == answer:
                think = narration.pick(
                    (
                        "Both formulations print the same result, so it is reliable.",
                        f"The recomputation agrees ({narration.short(answer, 60)}), so I report it.",
                        "Same value both ways; that settles it.",
                    ),
                    self._seed,
                    "agree",
                )
            else:
                think = (
                    f"The two computations disagree: {first[:200]!r} first, {answer[:200]!r} on re-computation. "
                    "The re-computation follows the question's wording directly, so I report its value."
                )
        else:
            think = self._think_answer(answer)
        return PolicyReply(protocol.format_answer_turn(think, answer), model=OFFLINE_MODEL)
