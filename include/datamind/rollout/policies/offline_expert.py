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
import re
from dataclasses import dataclass
from typing import Any

from datamind.rollout import protocol
from datamind.rollout.agent import PolicyGaveUp, PolicyReply

OFFLINE_MODEL = "offline-expert"


@dataclass(frozen=True)
class HopProgram:
    question: str
    program: str  # Python (SQL solutions are wrapped into an execute_sql call, see ``as_python``)
    hop: int


def is_python(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def as_python(program: str, lang: str | None, hop: int) -> str:
    """A runnable cell: Python as is; a bare SQL statement becomes a call of the SQL session's tool."""
    program = program.strip()
    if (lang or "python") == "sql" and not is_python(program):
        out = f"hop{hop}_result.csv"
        # execute_sql saves the rows and returns only a summary line: read the CSV back to show the values
        # (one cell as itself, else rows joined by "; " and cells by ", ", like the reference answers).
        return (
            "import csv\n"
            f"summary = execute_sql(sql={program!r}, output_path={out!r})\n"
            f"with open({out!r}, newline='') as fh:\n"
            "    rows = list(csv.reader(fh))[1:]\n"
            "print(rows[0][0] if len(rows) == 1 and len(rows[0]) == 1 else '; '.join(', '.join(r) for r in rows))"
        )
    return program


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


def describe_program(code: str) -> str:
    """A short, honest name for the formulation a program uses (shown in the policy label and the reasoning)."""
    low = code.lower()
    if "execute_sql" in low:
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
    if data_format == "sqlite":
        return "print(get_db_info())"
    reader = "read_excel" if data_format == "xlsx" else "read_csv"
    args = "".join(f", {k}={v!r}" for k, v in (read_kwargs or {}).items())
    return (
        "import pandas as pd\n"
        f"df = pd.{reader}({file_name!r}{args})\n"
        'print("shape:", df.shape)\n'
        "print(df.dtypes.to_string())\n"
        "print(df.head(3).to_string())"
    )


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


class OfflineExpertPolicy:
    """Replays ``hops`` (ancestors first, the query itself last) for one variant index."""

    def __init__(
        self,
        *,
        hops: list[HopProgram],
        inspect: str,
        data_format: str,
        file_name: str,
        variant_label: str,
        cross_check: str | None = None,
    ) -> None:
        if not hops:
            raise ValueError("an offline trajectory needs at least one hop program")
        self.name = f"offline:{variant_label}" + (":cross-check" if cross_check else "")
        self._data_format = data_format
        self._file_name = file_name
        self._steps: list[tuple[str, str]] = [(self._inspect_think(), inspect)]
        k = len(hops)
        for i, h in enumerate(hops, start=1):
            self._steps.append((self._hop_think(h, i, k), h.program))
        if cross_check is not None:
            self._steps.append(
                (
                    "Before answering, re-compute the result with an independent formulation of the same "
                    "question, to make sure the number does not depend on how the computation was written.",
                    cross_check,
                )
            )
        self._cross_checked = cross_check is not None
        self._outputs: list[str] = []

    def _inspect_think(self) -> str:
        if self._data_format == "sqlite":
            return "First look at the database schema (tables, columns, types) so the queries use real names."
        return (
            f"First load {self._file_name} and print its shape, column types and first rows, so the later "
            "steps use the right column names and types."
        )

    @staticmethod
    def _hop_think(h: HopProgram, i: int, k: int) -> str:
        how = describe_program(h.program)
        if k == 1:
            return f"The data is understood. Now the question: {h.question}\nI compute it with {how} and print the result."
        if i < k:
            return f"Step {i} of {k}: {h.question}\nI compute this intermediate result with {how} and print it."
        return (
            f"Step {k} of {k}, building on the previous results: {h.question}\n"
            f"I compute it with {how} and print the final value."
        )

    async def next_turn(self, messages: list[dict], last_observation: Any | None) -> PolicyReply:
        step = sum(1 for m in messages if m["role"] == "assistant")
        if step > 0:
            if last_observation is None or not getattr(last_observation, "ok", False):
                kind = getattr(last_observation, "error_kind", None) or "no_output"
                raise PolicyGaveUp("replay_failed", f"offline step {step} did not run cleanly ({kind})")
            self._outputs.append(printed_value(last_observation.output))
        if step < len(self._steps):
            think, code = self._steps[step]
            return PolicyReply(protocol.format_code_turn(think, code), model=OFFLINE_MODEL)
        if step > len(self._steps):
            raise PolicyGaveUp("replay_exhausted", "offline policy has no further turns")
        answer = self._outputs[-1]
        if not answer:
            raise PolicyGaveUp("empty_output", "the final program printed nothing")
        if self._cross_checked:
            first = self._outputs[-2]
            if first == answer:
                think = "Both formulations print the same result, so it is reliable."
            else:
                think = (
                    f"The two computations disagree: {first[:200]!r} first, {answer[:200]!r} on re-computation. "
                    "The re-computation follows the question's wording directly, so I report its value."
                )
        else:
            think = "The program printed the value the question asks for."
        return PolicyReply(protocol.format_answer_turn(think, answer), model=OFFLINE_MODEL)
