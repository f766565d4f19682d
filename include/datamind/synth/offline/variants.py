"""Alternative programs for a question: the same analysis through other engines.

The offline expert samples its N trajectories from a query's reference solution plus these variants,
so the self-consistency judge compares genuinely independent computations (pandas, DuckDB SQL,
SQLite SQL, polars SQL) rather than the same program three times. Variants are *expected* to agree with the
reference; where an engine differs (NULL handling, rounding, tie order), the judge sees the
disagreement and the reflection loop has real work to do.

Every variant is a self-contained program naming its data file relative to its working directory.
For SQLite sources the variants stay within the sandbox's SQL tools (``execute_sql`` writes a CSV
that pandas or DuckDB then reads), because SQL sessions may not open the database directly.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from datamind.data_source import Source
from datamind.sandbox.sqltools import ReadOnlyDatabase
from datamind.synth.offline.execute import ExecutionError, run_python
from datamind.synth.offline.generators import Task, task_text

if TYPE_CHECKING:
    import pandas as pd

# Prints a query result the way reference answers are formatted (``execute.format_rows``): one cell as itself,
# one column as a list, else rows joined by "; " and cells by ", ", floats rounded to 4 places.
_PRINT_ROWS = """
def _cell(v):
    return repr(round(v, 4)) if isinstance(v, float) else str(v)

if len(rows) == 1 and len(rows[0]) == 1:
    print(_cell(rows[0][0]))
elif all(len(r) == 1 for r in rows):
    print(", ".join(_cell(r[0]) for r in rows))
else:
    print("; ".join(", ".join(_cell(v) for v in r) for r in rows))
"""


def _duckdb_over_frame(preamble: str, sql: str) -> str:
    return (
        preamble + "import duckdb\n\n" + f"rows = duckdb.sql({sql.replace('{src}', 'df')!r}).fetchall()\n" + _PRINT_ROWS
    )


def _sqlite_over_frame(preamble: str, sql: str) -> str:
    return (
        preamble
        + "import sqlite3\n\n"
        + "con = sqlite3.connect(':memory:')\n"
        + "df.to_sql('t', con, index=False)\n"
        + f"rows = con.execute({sql.replace('{src}', 't')!r}).fetchall()\n"
        + "con.close()\n"
        + _PRINT_ROWS
    )


def _polars_over_frame(preamble: str, sql: str) -> str:
    # polars runs its own SQL engine over an Arrow copy of the frame: a third, independent computation
    return (
        preamble
        + "import polars as pl\n\n"
        + "ctx = pl.SQLContext(t=pl.from_pandas(df))\n"
        + f"rows = ctx.execute({sql.replace('{src}', 't')!r}, eager=True).rows()\n"
        + _PRINT_ROWS
    )


def candidate_variants(task: Task, source: Source, lang: str) -> list[str]:
    """Alternative programs for ``task`` besides the reference written in ``lang``."""
    out: list[str] = []
    source = source.narrowed(task_text(task))
    # DuckDB's own formulation where a task has one (date functions differ: strftime's arguments are swapped),
    # else the SQLite statement, which DuckDB runs as written
    duck_sql = task.duck or task.sql
    if source.fmt == "sqlite":
        if lang == "sql":
            preamble = source.python_preamble(task.imports)
            out.append(preamble + "\n" + task.py + "\nprint(answer)\n")
            if duck_sql:
                out.append(_duckdb_over_frame(preamble, duck_sql))
        elif task.duck:
            preamble = source.python_preamble(task.imports)
            out += [
                _duckdb_over_frame(preamble, task.duck),
                *_alternative_bodies(task, source),
                _polars_over_frame(preamble, task.duck),
            ]
        else:
            out += _alternative_bodies(task, source)
        return out
    preamble = source.python_preamble(task.imports)
    if duck_sql:
        out.append(_duckdb_over_frame(preamble, duck_sql))
    if task.sql:
        out.append(_sqlite_over_frame(preamble, task.sql))
    out += _alternative_bodies(task, source)
    if duck_sql:
        out.append(_polars_over_frame(preamble, duck_sql))
    return out


def _alternative_bodies(task: Task, source: Source) -> list[str]:
    return [source.python_preamble(imports) + "\n" + body + "\nprint(answer)\n" for body, imports in task.alt]


def runnable_variants(task: Task, source: Source, lang: str, scratch_dir: str, frame: pd.DataFrame) -> list[str]:
    """The variants that run and print something; one that fails to run is dropped, not stored.

    ``frame``: the table as the source's reading loads it (the view's frame, read in the parser child).
    A file variant runs without its reading, on a copy of that frame, as candidates do (``run_body_on_frame``):
    its reading is the source's own, and a staged file is parsed only in the capped child, never here."""
    programs = candidate_variants(task, source, lang)
    if not programs:
        return []
    database = ReadOnlyDatabase(source.data_path) if source.fmt == "sqlite" else None
    # SQLite variants go through the sandbox's own read-only execute_sql and write relation.csv: run
    # them in a scratch dir; file-based variants run next to their data file, as they name it.
    preset = {"execute_sql": database.execute_sql} if database else None
    cwd = scratch_dir if database else os.path.dirname(os.path.abspath(source.data_path))
    reading = None if database else _reading(source)
    kept = []
    try:
        for program in programs:
            try:
                if reading is None:
                    printed = run_python(program, preset=preset, cwd=cwd)
                elif reading in program:
                    printed = run_python(program.replace(reading, "", 1), preset={"df": frame.copy()}, cwd=cwd)
                else:  # every file variant starts with the source's reading (candidate_variants)
                    raise ExecutionError("the variant does not read its table the source's way")
                if printed.strip():
                    kept.append(program)
            except ExecutionError:
                continue
    finally:
        if database:
            database.close()
    return kept


def _reading(source: Source) -> str:
    """The lines of a file source's preamble after its imports: the file's path and the read into ``df``."""
    preamble = source.python_preamble()
    return preamble[preamble.index("DATA_PATH = ") :]
