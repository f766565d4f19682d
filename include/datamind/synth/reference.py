"""Executed reference answers for model-written questions.

The LLM synthesizer writes a question *and* the program that answers it. That program is untrusted
code, so it runs where trajectories run: Python in the sandbox (CPU, memory and time caps, no network,
a private copy of the data file), SQL through the sandbox's read-only SQL tool (authorizer, time
limit). What it prints, checked as the offline engine checks its own answers (not empty, not
degenerate, not an essay), becomes the query's reference answer: the ground truth the judge compares
agreed answers with, and the value the next hop of a chain builds on.
"""

from __future__ import annotations

import re

from datamind.data_source import Source
from datamind.sandbox.sqltools import ReadOnlyDatabase, SqlToolError
from datamind.synth.offline.engine import DEGENERATE, MAX_ANSWER_CHARS
from datamind.synth.offline.execute import ExecutionError, format_rows

_FENCE = re.compile(r"^\s*```[\w+-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)
MAX_ERROR_CHARS = 1500


def strip_fences(code: str) -> str:
    """A program as the model wrote it inside ``<code>``, without a Markdown fence around it."""
    m = _FENCE.match(code)
    return (m.group(1) if m else code).strip("\n")


def check_answer(answer: str) -> str:
    answer = answer.strip()
    if not answer:
        raise ExecutionError("the program printed nothing; it must print the answer")
    if len(answer) > MAX_ANSWER_CHARS:
        raise ExecutionError(f"the program printed {len(answer)} characters; print only the answer")
    if DEGENERATE.search(answer):
        raise ExecutionError(f"the program printed a missing or infinite value ({answer[:80]!r})")
    return answer


def complete_program(lang: str, code: str, source: Source) -> str:
    """The stored, self-contained program: a Python program is written after the source's read code, which
    runs first, unless it starts with that code itself (SQL stands alone).

    The model writes only the analysis: copying the read code cost most of a synthesis call's generated
    tokens, and a model that re-typed a messy sheet's repair code broke it (2 of 4 failing references)."""
    if lang != "python":
        return code
    preamble = source.python_preamble().strip()
    return code if code.lstrip().startswith(preamble) else f"{preamble}\n{code}"


class ReferenceRunner:
    """Runs reference programs against one source's data file. ``sandbox`` is a
    :class:`datamind.sandbox.Sandbox` (or ``None`` when only SQL will run)."""

    def __init__(self, sandbox, sql_timeout_s: float = 10.0) -> None:
        self._sandbox = sandbox
        self._sql_timeout_s = sql_timeout_s

    def lang_for(self, source: Source) -> str:
        return source.solution_lang_default

    def run(self, lang: str, program: str, source: Source) -> str:
        if lang == "sql":
            return check_answer(self._run_sql(program, source.data_path))
        if lang != "python":
            raise ExecutionError(f"unknown program language {lang!r}")
        if self._sandbox is None:
            raise ExecutionError("no sandbox to run a Python reference program in")
        with self._sandbox.session([source.data_path]) as session:
            obs = session.run(program)
        if not obs.ok:
            raise ExecutionError(f"the program failed ({obs.error_kind}):\n{obs.output[-MAX_ERROR_CHARS:]}")
        return check_answer(obs.output)

    def _run_sql(self, sql: str, db_path: str) -> str:
        db = ReadOnlyDatabase(db_path, timeout_s=self._sql_timeout_s)
        try:
            _, rows = db.query(sql)
        except SqlToolError as exc:
            raise ExecutionError(str(exc)) from None
        finally:
            db.close()
        if not rows:
            raise ExecutionError("the query returned no rows")
        return format_rows(rows)
