"""Run reference solutions and turn what they print into the canonical answer string.

``run_python`` executes the full program text (preamble included) in-process with stdout captured:
the generator's own programs, whose only data-derived parts are ``repr``-quoted literals, so this
is cheap and exact. ``run_in_subprocess`` runs a batch of programs in a fresh interpreter with a
timeout; tests and the ``verify`` option use it to prove each stored text runs on its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import warnings
from urllib.parse import quote


class ExecutionError(RuntimeError):
    pass


def format_value(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(round(value, 4))
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def format_rows(rows: list[tuple]) -> str:
    """SQL result -> answer: a single cell as itself, one column's values as a list (', '), else rows joined by
    '; ' and cells by ', ' (the three top regions are 'a, b, c', as pandas and the question write a list)."""
    if len(rows) == 1 and len(rows[0]) == 1:
        return format_value(rows[0][0])
    if all(len(row) == 1 for row in rows):
        return ", ".join(format_value(row[0]) for row in rows)
    return "; ".join(", ".join(format_value(c) for c in row) for row in rows)


def run_python(program: str, preset: dict | None = None, cwd: str | None = None) -> str:
    """Run ``program`` in-process from ``cwd`` (where its data file is), returning what it printed."""
    buf = io.StringIO()
    namespace = {"__name__": "__main__", **(preset or {})}
    workdir = contextlib.chdir(cwd) if cwd else contextlib.nullcontext()
    try:
        with workdir, contextlib.redirect_stdout(buf), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(program, "<reference_solution>", "exec"), namespace)  # noqa: S102 - own generated code
    except Exception as exc:  # any failure of a candidate program is a reason to drop it
        raise ExecutionError(f"{type(exc).__name__}: {exc}") from exc
    return buf.getvalue().strip()


def run_body_on_frame(imports: str, body: str, df) -> str:
    """Run a program's body on an already-loaded copy of its data frame.

    Equivalent to running the full program (whose preamble only imports and reads the file into
    ``df``) but without re-reading the file for every candidate; the full texts are proven to run on
    their own by ``run_in_subprocess`` in the tests.
    """
    return run_python(imports + "\n" + body + "\nprint(answer)\n", {"df": df.copy()})


def run_sql(db_path: str, sql: str) -> str:
    try:
        con = sqlite3.connect(f"file:{quote(os.path.abspath(db_path))}?mode=ro", uri=True)
        try:
            rows = con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise ExecutionError(f"{type(exc).__name__}: {exc}") from exc
    return format_rows(rows)


def run_solution(lang: str, solution: str, db_path: str | None = None) -> str:
    """Run a reference solution against the data file ``db_path`` (any format, despite the name).

    Python programs name the file relative to their working directory, so they run from its folder.
    """
    if lang == "python":
        if db_path and _is_sqlite(db_path):
            return _run_with_sql_tool(solution, db_path)
        return run_python(solution, cwd=os.path.dirname(os.path.abspath(db_path)) if db_path else None)
    if lang == "sql":
        if not db_path:
            raise ExecutionError("an SQL solution needs the SQLite file path")
        return run_sql(db_path, solution)
    raise ExecutionError(f"unknown solution language {lang!r}")


def _is_sqlite(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"


def _run_with_sql_tool(program: str, db_path: str) -> str:
    """A stored SQLite program reads the database only through execute_sql, as in the agent's SQL session:
    run it with the sandbox's own read-only tool, in a scratch directory for the CSV it writes."""
    from datamind.sandbox.sqltools import ReadOnlyDatabase

    database = ReadOnlyDatabase(db_path)
    try:
        with tempfile.TemporaryDirectory(prefix="sql-program-") as scratch:
            return run_python(program, preset={"execute_sql": database.execute_sql}, cwd=scratch)
    finally:
        database.close()


_HARNESS = r"""
import json, signal, sys
sys.path.insert(0, sys.argv[1])
from execute import run_solution
per_job = float(sys.argv[2])

def _expired(signum, frame):
    raise TimeoutError(f"ran longer than {per_job:g} s")

signal.signal(signal.SIGALRM, _expired)
jobs = json.load(sys.stdin)
out = []
for job in jobs:
    signal.setitimer(signal.ITIMER_REAL, per_job)
    try:
        out.append({"ok": True, "answer": run_solution(job["lang"], job["solution"], job.get("db_path"))})
    except BaseException as exc:  # TimeoutError surfaces as ExecutionError from run_python
        out.append({"ok": False, "error": str(exc)})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
sys.stdout.write(json.dumps(out))
"""


def run_in_subprocess(jobs: list[dict], timeout_s: float | None = None, per_job_timeout_s: float = 30.0) -> list[dict]:
    """Run ``[{lang, solution, db_path?}]`` in one fresh interpreter; ``[{ok, answer|error}]`` in order.

    Each Python program runs from its full text (reads its own data file); nothing from this
    process is shared with it except this module's runner. A program running past
    ``per_job_timeout_s`` fails alone; ``timeout_s`` bounds the whole batch.
    """
    if not jobs:
        return []
    here = os.path.dirname(os.path.abspath(__file__))
    total = timeout_s if timeout_s is not None else 60 + per_job_timeout_s * len(jobs)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _HARNESS, here, str(per_job_timeout_s)],
            input=json.dumps(jobs),
            capture_output=True,
            text=True,
            timeout=total,
        )
    except subprocess.TimeoutExpired as exc:
        raise ExecutionError(f"runner exceeded {total:g} s for {len(jobs)} programs") from exc
    if proc.returncode != 0:
        raise ExecutionError(f"runner exited with {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)
