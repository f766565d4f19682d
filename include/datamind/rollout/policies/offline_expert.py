"""An expert policy without an LLM: it replays a query's reference solution chain as a real multi-turn trajectory.

Turn 1 inspects the data (schema / first rows); turns 2..k+1 run the chain's hop programs in order, one hop
per turn, each through the same sandbox session as an LLM agent would use; the last turn answers with what
the final hop printed.  Every interpreter message is the real output of that execution.

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
from dataclasses import dataclass
from typing import Any

from datamind.rollout import protocol
from datamind.rollout.agent import PolicyGaveUp, PolicyReply
from datamind.rollout.policies import narration
from datamind.synth.offline.phrasing import final_ask, without_format

OFFLINE_MODEL = "offline-expert"


@dataclass(frozen=True)
class HopProgram:
    question: str
    program: str  # Python (SQL solutions are wrapped into a call of the SQL tool, see ``as_python``)
    hop: int


def is_python(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


SQL_HELPER = "run_sql"
# execute_sql saves a query's rows to a CSV and returns only a summary line, so a session's first SQL step
# defines one small function that runs a query and returns its rows as text (one cell as itself, else rows
# joined by "; " and cells by ", ", like the reference answers); later steps call it.
_SQL_HELPER_DEF = f"""import csv


def {SQL_HELPER}(sql, path):
    execute_sql(sql=sql, output_path=path)
    with open(path, newline='') as fh:
        rows = list(csv.reader(fh))[1:]
    return rows[0][0] if len(rows) == 1 and len(rows[0]) == 1 else '; '.join(', '.join(r) for r in rows)


"""


def is_bare_sql(program: str, lang: str | None) -> bool:
    """A database solution written as a bare SQL statement (run through the SQL tool, see ``as_python``)."""
    return (lang or "python") == "sql" and not is_python(program.strip())


def as_python(program: str, lang: str | None, hop: int, helper_defined: bool = False) -> str:
    """A runnable cell: Python as is; a bare SQL statement becomes a call of ``run_sql`` (defined by this
    cell unless an earlier cell of the session did), which prints the query's rows."""
    program = program.strip()
    if not is_bare_sql(program, lang):
        return program
    call = f"print({SQL_HELPER}({program!r}, {f'hop{hop}_result.csv'!r}))"
    return call if helper_defined else _SQL_HELPER_DEF + call


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


def describe_program(code: str) -> str:
    """A short, honest name for the formulation a program uses (shown in the policy label and the reasoning)."""
    low = code.lower()
    if not _TOUCHES_DATA.search(code):  # e.g. a yes/no check of the previous result against a threshold
        return "sql-constant" if f"{SQL_HELPER}(" in code else "arithmetic"
    if "execute_sql" in low or f"{SQL_HELPER}(" in low:
        return "sql-tool+pandas" if re.search(r"\bpd\.|pandas", low) else "sql-tool"
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


def inspect_code(data_format: str, file_name: str, read_kwargs: dict | None) -> str:
    """The first look an analyst takes: default reading options (only the sheet the task names), so a
    file that needs special handling shows its problem in the output."""
    if data_format == "sqlite":
        return "print(get_db_info())"
    if data_format == "xlsx":
        sheet = (read_kwargs or {}).get("sheet_name")
        sheet_arg = f", sheet_name={sheet!r}" if sheet is not None else ""
        read = f"df = pd.read_excel({file_name!r}{sheet_arg}, engine='calamine')"
    else:
        read = f"df = pd.read_csv({file_name!r})"
    return "import pandas as pd\n" + read + "\n" + SHOW_FRAME


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


def blunder_of(program: str, known: list[str]) -> tuple[str, str, str] | None:
    """A plausible slip in a program: one column name written the way people mistype it (lower case,
    or a stray plural).  Returns (faulty program, wrong name, right name), or None when no column
    reference can be altered into a name that does not exist."""
    # SQLite reads an unknown double-quoted identifier as a string literal: a slip there prints a wrong
    # value instead of failing, so only programs whose engines reject unknown names get one.
    if re.search(rf"execute_sql|{SQL_HELPER}\(|sqlite3", program):
        return None
    # SQL engines resolve identifiers case-insensitively, so there only a changed spelling fails.
    sql = re.search(r"duckdb|polars", program) is not None
    lowered = {k.lower() for k in known}
    for name in known:
        if not name or len(name) < 3:
            continue
        plural = name[:-1] if name.endswith("s") else name + "s"
        wrong = name.lower() if name.lower() != name and not sql else plural
        if wrong in known or (sql and wrong.lower() in lowered):
            continue
        for quote in ("'", '"'):
            lit = f"{quote}{name}{quote}"
            if lit in program:
                return program.replace(lit, f"{quote}{wrong}{quote}", 1), wrong, name
    return None


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
_RELATION_LOAD = re.compile(
    r"^execute_sql\(sql=.*, output_path='relation\.csv'\)\ndf = pd\.read_csv\('relation\.csv'\)\n", re.M
)


def _reuse_relation(hops: list[HopProgram], check: str | None) -> tuple[list[HopProgram], str | None]:
    """A later step that loads the relation an earlier step of the session already loaded into ``df`` works
    on that ``df`` (no step reassigns it) instead of fetching the same rows again."""
    loaded: str | None = None
    out: list[HopProgram] = []
    for h in hops:
        m = _RELATION_LOAD.search(h.program)
        if m and m.group(0) == loaded:
            h = HopProgram(h.question, h.program.replace(loaded, "", 1), h.hop)
        elif m:
            loaded = m.group(0)
        out.append(h)
    if check and loaded and loaded in check:
        check = check.replace(loaded, "", 1)
    return out, check


@dataclass
class _Step:
    kind: str  # explore | fix | hop | blunder | check
    code: str
    hop: HopProgram | None = None
    index: int = 0  # hop number (1-based) for hop/blunder steps
    wrong: str = ""
    right: str = ""
    wrong_output: str | None = None  # what a faulty step printed when it did not fail


class OfflineExpertPolicy:
    """Replays ``hops`` (ancestors first, the query itself last) for one variant index.

    The turns are planned up front but narrated from what each execution printed: a first read with
    default options; a corrected read when that output shows a problem (title rows, unnamed columns, one
    fused column, a decode error); one turn per hop; sometimes (``blunder_rate``) a hop first run with a
    mistyped column name, so the trajectory holds a real error, its diagnosis and the fix; the answer.

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
        blunder_rate: float = 0.2,
        question: str = "",
        settle_threshold: float | None = None,
    ) -> None:
        if not hops:
            raise ValueError("an offline trajectory needs at least one hop program")
        self.name = f"offline:{variant_label}" + (":cross-check" if cross_check else "")
        self._data_format = data_format
        self._file_name = file_name
        self._seed = seed or variant_label
        # quoted in thinks without the answer-format sentence the question ends with
        self._question = without_format(question or hops[-1].question)
        self._hops = hops
        self._fixed_read = fixed_read
        # the first look (a default read) loads `df` exactly as the steps' reading block does
        self._reuse_first_read = reuse_first_read and fixed_read is not None
        self._cross_check = cross_check
        self._blunder_rate = blunder_rate
        self._max_turns = max_turns
        self._plan: list[_Step] = [_Step("explore", inspect)]
        self._outputs: list[str] = []
        self._known: list[str] = []  # column names the latest good read showed
        self._schema = ""  # what the first look printed
        self._cross_checked = cross_check is not None
        self._settle_threshold = settle_threshold if len(hops) > 1 else None
        self._settle_step: _Step | None = None  # the last hop's cell, run only when words cannot settle it

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
        budget = self._budget()
        reads_done = False  # whether `df` in the session is already the frame each step's own read would give
        # An empty column left by a trailing delimiter is dropped from the frame the session holds; a re-read
        # with the options the first look already used would print it again (a fix that changes nothing).
        default_read = not self._fixed_read or self._reuse_first_read
        if ok and problem and default_read and "delimiter" in problem and budget >= 1:
            self._plan.append(_Step("fix", DROP_EMPTY_UNNAMED))
            budget -= 1
            self._known = [n for n in view.names if not n.startswith("Unnamed: ")]
            reads_done = self._reuse_first_read  # steps drop their read and run on the session's `df`
        elif self._fixed_read and (problem or not ok) and not self._reuse_first_read and budget >= 1:
            # (a reading the first look already made is no fix: announcing one would teach a fix that changes nothing)
            self._plan.append(_Step("fix", self._fixed_read.rstrip() + "\n" + SHOW_FRAME))
            budget -= 1
            reads_done = True  # the corrected read
        elif not ok:
            kind = getattr(obs, "error_kind", None) or "no_output"
            raise PolicyGaveUp("replay_failed", f"offline step 1 did not run cleanly ({kind})")
        else:
            self._known = view.names
            reads_done = self._reuse_first_read  # the first look, where it read the way the steps do
        hops, check = self._hops, self._cross_check
        if reads_done:  # later steps build on the session's `df` instead of repeating the read
            hops = [HopProgram(h.question, without_reading(h.program, self._fixed_read), h.hop) for h in hops]
            check = without_reading(check, self._fixed_read) if check else None
        if self._data_format == "sqlite":
            hops, check = _reuse_relation(hops, check)
        if self._settle_threshold is not None:
            self._settle_step = _Step("hop", hops[-1].program, hops[-1], len(hops))
            hops, check = hops[:-1], None
        blunder_at = len(hops) if narration.chance(self._seed, "blunder", self._blunder_rate) else 0
        for i, h in enumerate(hops, start=1):
            if i == blunder_at and budget >= 1:
                known = self._known or self._names_in_schema()
                slip = blunder_of(h.program, known)
                if slip is not None:
                    self._plan.append(_Step("blunder", slip[0], h, i, slip[1], slip[2]))
                    budget -= 1
            self._plan.append(_Step("hop", h.program, h, i))
        if check:
            self._plan.append(_Step("check", check, hops[-1], len(hops)))

    def _names_in_schema(self) -> list[str]:
        """Column names a database schema print showed (quoted or bare identifiers on its lines)."""
        names = re.findall(
            r"[\"`']?([A-Za-z_][\w ]{1,40}?)[\"`']?\s+(?:INTEGER|TEXT|REAL|NUMERIC|VARCHAR|INT|"
            r"FLOAT|DOUBLE|DATE|DATETIME|BOOLEAN|CHAR|DECIMAL|BIGINT)",
            self._schema,
            re.IGNORECASE,
        )
        return list(dict.fromkeys(n.strip() for n in names))

    # -- narration --------------------------------------------------------------------------------
    def _focus(self, program: str, index: int, form: str) -> str:
        """What step ``index`` works on, to anchor its sentence: the columns its program uses; else the tables
        its query reads, or the data file; a step that reads no data works on the previous result. ``form``
        is ``describe_program(program)``."""
        # the lines that load the data name every column of the relation: the step's own columns are in the rest
        body = "\n".join(line for line in program.splitlines() if "relation.csv" not in line and "read_" not in line)
        cols = narration.columns_used(body, self._known or self._names_in_schema())
        if cols:
            return narration.name_list(cols, 2)
        if form in ("arithmetic", "sql-constant") and index > 1 and self._outputs:
            return f"the result of step {index - 1} ({narration.short(self._outputs[-1], 40)})"
        if form.startswith("sql-tool"):
            named = set(re.findall(r"\b(\w+)\s+AS\s*\(", body, re.IGNORECASE))  # a WITH clause's own relations
            tables = [t for t in dict.fromkeys("".join(m) for m in _FROM_TABLE.findall(body)) if t not in named]
            if tables:
                return "the " + narration.name_list(tables, 2) + (" table" if len(tables) == 1 else " tables")
        return self._file_name

    def _q_short(self, question: str | None = None) -> str:
        words = final_ask(without_format(question or self._question)).split()
        return " ".join(words[:9]) + (" ..." if len(words) > 9 else "")

    # Every sentence below names something specific to this trajectory (its question, file, columns or
    # values): a sentence that reads the same across samples is a template a model would learn by rote.
    def _think_explore(self) -> str:
        # A multi-step question is quoted by its first step: that is what the first look serves.
        f, q = self._file_name, narration.opening(self._question, 110)
        if self._data_format == "sqlite":
            options = (
                f'"{q}" needs data from {f}, so before writing SQL I list its tables, columns and keys.',
                f'For "{q}" I first look at the schema of {f}, so that the queries use real names.',
                f'{f} is a database I have not seen, so for "{q}" its schema comes first, then the queries.',
                f'To answer "{q}" I have to know which tables of {f} hold the data, so I start with the schema.',
            )
        else:
            options = (
                f'"{q}" is about {f}, so I load it with default settings and look at its shape, types and first rows.',
                f'A plain read of {f} comes first for "{q}", to see what its columns are called and how they are '
                "typed.",
                f'Nothing is known about {f} yet, and "{q}" depends on its columns, so a default read and its '
                "structure come first.",
                f'To answer "{q}" I first need the layout of {f}: a default read, then shape, dtypes and the head.',
                f'First step for "{q}": open {f}, print the size and the column types, and check a few rows.',
            )
        return narration.pick(options, self._seed, "explore")

    def _think_fix(self, problem: str | None, error: str | None, code: str | None = None) -> str:
        how = narration.describe_fix(code or self._fixed_read or "")
        seen = problem or (f"the read failed ({error})" if error else "the first read does not look like a clean table")
        q = self._q_short()
        if code == DROP_EMPTY_UNNAMED:
            return narration.pick(
                (
                    f'In that output {seen}; it carries nothing for "{q}", so I drop empty unnamed columns and '
                    "list the ones that remain.",
                    f'Looking at the columns, {seen}. The data itself reads fine, so for "{q}" I only remove '
                    "columns that are unnamed and empty.",
                ),
                self._seed,
                "fix",
            )
        return narration.pick(
            (
                f'The output shows a problem: {seen}; before working on "{q}" I read it again with {how} and check '
                "the structure.",
                f'Looking at that output, {seen}; for "{q}" I need a second read with {how}.',
                f'That read is not usable for "{q}" yet, because {seen}; reading it again with {how} should give a '
                "proper table.",
            ),
            self._seed,
            "fix",
        )

    def _think_hop(self, step: _Step) -> str:
        k = len(self._hops)
        h = step.hop
        assert h is not None
        form = describe_program(h.program)
        focus = self._focus(h.program, step.index, form)
        how = narration.pick(narration.FORMULATION.get(form, ("compute it",)), self._seed, f"form-{step.index}")
        q = without_format(h.question.strip()).rstrip()
        if k > 1:  # each step quotes what its own hop asks, not the steps restated before it
            q = final_ask(q)
        prev = narration.short(self._outputs[-1], 80) if step.index > 1 and self._outputs else None
        if k == 1:
            lead = narration.pick(
                (
                    f"Now the question itself: {q}",
                    f"With the schema in view: {q}"
                    if self._data_format == "sqlite"
                    else f"With the data read correctly: {q}",
                    f"Question: {q}",
                    f"What is asked: {q}",
                ),
                self._seed,
                "q",
            )
        elif prev is not None:
            lead = narration.pick(
                (
                    f"With {prev} from the previous step, step {step.index} of {k} asks: {q}",
                    f"Step {step.index} of {k} builds on {prev}: {q}",
                    f"Step {step.index - 1} gave {prev}, which step {step.index} of {k} takes further: {q}",
                ),
                self._seed,
                f"q-{step.index}",
            )
        else:
            lead = narration.pick(
                (
                    f"Step 1 of {k}: {q}",
                    f"The question breaks into {k} steps, and the first is: {q}",
                    f"I start with the first of {k} steps: {q}",
                ),
                self._seed,
                f"q-{step.index}",
            )
        plan = narration.pick(
            (
                f"it depends on {focus}, so I {how} and print the result",
                f"for {focus} I {how} and print the value",
                f"using {focus}, I {how}",
                f"{focus} {'are' if ' and ' in focus else 'is'} what matters here, so I {how} and print what comes out",
            ),
            self._seed,
            f"p-{step.index}",
        )
        joins = narration.join_reasons(h.program, self._seed, f"j-{step.index}")
        if joins:
            return f"{lead} - {'; '.join(joins)}. Then {plan}."
        return f"{lead} - {plan}."

    def _think_after_blunder(self, step: _Step, obs: Any) -> str:
        q = self._q_short(step.hop.question if step.hop else None)
        if step.wrong_output is not None:
            return (
                f'The output {narration.short(step.wrong_output, 60)!r} cannot be right for "{q}": {step.wrong!r} '
                f"is not a column of the data, the name is {step.right!r}, so I run the step again with it."
            )
        error = narration.read_view(getattr(obs, "output", "") or "").error or "an error"
        return narration.pick(
            (
                f"That failed with {error}: there is no column {step.wrong!r}, the data calls it {step.right!r}, "
                f'so I rerun the step for "{q}" with the right name.',
                f"The cell raised {error} because I mistyped the column ({step.wrong!r} instead of {step.right!r}); "
                f'same computation for "{q}", fixed name.',
                f"{error} - the name is {step.right!r} in the data, not {step.wrong!r}, so I repeat the step for "
                f'"{q}" with it.',
            ),
            self._seed,
            "err",
        )

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
        prev, k = narration.short(self._outputs[-1], 40), len(self._hops)
        compared = f"{prev} is {'above' if verdict == 'Yes' else 'not above'} {self._settle_threshold:g}"
        q = self._q_short(self._hops[-1].question)
        return narration.pick(
            (
                f'That settles "{q}" without more code: {compared}, so the answer is {verdict}.',
                f"Step {k} only compares the result of step {k - 1} with a fixed number. {compared}, so the "
                f"answer is {verdict}.",
                f'"{q}" needs nothing beyond the number above: {compared}, which makes it {verdict}.',
                f'For "{q}" the printed number is all I need: {compared}, hence {verdict}.',
            ),
            self._seed,
            "settled",
        )

    def _think_answer(self, answer: str) -> str:
        a = narration.short(answer, 100)
        q = self._q_short()
        return narration.pick(
            (
                f'The last output, {a}, answers "{q}".',
                f'The computation for "{q}" returned {a}, which is the answer.',
                f'For "{q}" the last cell printed {a}.',
                f'{a} is what "{q}" asks for, computed above.',
                f'So the answer to "{q}" is {a}, taken from the printed result.',
            ),
            self._seed,
            "answer",
        )

    # -- the loop ---------------------------------------------------------------------------------
    async def next_turn(self, messages: list[dict], last_observation: Any | None) -> PolicyReply:
        step_no = sum(1 for m in messages if m["role"] == "assistant")
        if step_no == 1:
            self._plan_after_explore(last_observation)
        elif step_no > 1:
            done = self._plan[step_no - 1]
            ok = last_observation is not None and getattr(last_observation, "ok", False)
            if done.kind == "blunder":
                if ok:  # an engine let the unknown name through: that output is not the step's result
                    done.wrong_output = printed_value(last_observation.output)
            elif not ok:
                kind = getattr(last_observation, "error_kind", None) or "no_output"
                raise PolicyGaveUp("replay_failed", f"offline step {step_no} did not run cleanly ({kind})")
            elif done.kind == "fix":
                self._known = narration.read_view(last_observation.output).names
            else:
                self._outputs.append(printed_value(last_observation.output))
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
                think = self._think_explore()
            elif step.kind == "fix":
                view = narration.read_view(getattr(last_observation, "output", "") or "")
                think = self._think_fix(narration.read_problem(view), view.error, step.code)
            elif step.kind in ("hop", "blunder") and step_no > 0 and self._plan[step_no - 1].kind == "blunder":
                think = self._think_after_blunder(self._plan[step_no - 1], last_observation)
            elif step.kind == "check":
                think = narration.pick(
                    (
                        "Before answering I recompute the final value with an independent formulation, "
                        "so the result does not hinge on one way of writing it.",
                        f"A second, independent computation of the last step guards against a slip in "
                        f"{describe_program(step.code)}.",
                        "I cross-check the final number with another formulation before reporting it.",
                    ),
                    self._seed,
                    "check",
                )
            else:
                think = self._think_hop(step)
            return PolicyReply(protocol.format_code_turn(think, step.code), model=OFFLINE_MODEL)
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
