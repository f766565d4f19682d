"""Solution variants: the same question through other engines (DuckDB, SQLite, pandas over execute_sql).

They are what makes the offline expert's self-consistency check real, so each must run on its own and,
on these small well-behaved tables, print the reference answer computed by a different engine.
"""

from __future__ import annotations

import math

from synth_fixtures import catalog_rows

from datamind.categories import CATEGORY_IDS
from datamind.sandbox.sqltools import ReadOnlyDatabase
from datamind.synth.offline.engine import synthesize_offline
from datamind.synth.offline.execute import run_python
from datamind.synth.offline.variants import candidate_variants, runnable_variants
from datamind.synth.table import load_view


def _same(a: str, b: str) -> bool:
    """Equal cell by cell, numbers by value: SQL engines print 5 where pandas prints 5.0."""
    cells_a = [c.strip() for row in a.split(";") for c in row.split(",")]
    cells_b = [c.strip() for row in b.split(";") for c in row.split(",")]
    if len(cells_a) != len(cells_b):
        return False
    for x, y in zip(cells_a, cells_b, strict=True):
        try:
            if not math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-9):
                return False
        except ValueError:
            if x != y:
                return False
    return True


def _variants_agree(root, path, tmp_path):
    checked = 0
    for row in catalog_rows(path):
        source, view = load_view(root, row)
        result = synthesize_offline(view, source, CATEGORY_IDS, 2, 0, row["table_id"])
        for cands in result.candidates.values():
            for cand in cands:
                variants = runnable_variants(cand.task, source, cand.lang, str(tmp_path), view.df)
                # polars' SQL lacks a few DuckDB functions (regr_slope...): those variants are dropped, no others
                candidates = candidate_variants(cand.task, source, cand.lang)
                assert {p for p in candidates if "polars" not in p} <= set(variants)
                for program in variants:
                    assert program != cand.solution
                    preset = (
                        {"execute_sql": ReadOnlyDatabase(source.data_path).execute_sql}
                        if source.fmt == "sqlite"
                        else None
                    )
                    cwd = str(tmp_path) if source.fmt == "sqlite" else str(path.parent)
                    out = run_python(program, preset=preset, cwd=cwd)
                    assert _same(out, cand.answer), (cand.task.question, program, out, cand.answer)
                    checked += 1
    return checked


def test_csv_variants_recompute_the_pandas_answer_with_duckdb_and_sqlite(root, small_csv, tmp_path):
    assert _variants_agree(root, small_csv, tmp_path) >= 10


def test_sqlite_variants_stay_within_the_sql_tools(root, small_sqlite, tmp_path):
    assert _variants_agree(root, small_sqlite, tmp_path) >= 5
    for row in catalog_rows(small_sqlite):
        source, view = load_view(root, row)
        result = synthesize_offline(view, source, CATEGORY_IDS, 1, 0, row["table_id"])
        for cands in result.candidates.values():
            for cand in cands:
                for program in candidate_variants(cand.task, source, cand.lang):
                    # SQL sessions refuse programs that open the database themselves.
                    assert "sqlite3.connect" not in program and "execute_sql(" in program
