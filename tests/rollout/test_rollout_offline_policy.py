"""Pure helpers of the offline expert: variant choice, path localisation, answer extraction."""

from __future__ import annotations

from datamind.rollout.policies.offline_expert import (
    as_python,
    describe_program,
    localize,
    printed_value,
    variant_programs,
)


def test_variant_programs_dedupe_and_keep_the_reference_first():
    row = {
        "reference_solution": "print(1)\n",
        "solution_variants": ["print(1)", "  ", None, "print(2)"],
        "data_format": "csv",
    }
    assert variant_programs(row) == ["print(1)\n", "print(2)"]


def test_database_sessions_only_get_programs_that_use_the_sql_tools():
    direct = "import sqlite3\ncon = sqlite3.connect('shop.sqlite')\nprint(con.execute('select 1').fetchone()[0])"
    row = {
        "reference_solution": "SELECT 1",
        "solution_variants": [direct, "summary = execute_sql('SELECT 1', 'o.csv')"],
        "data_format": "sqlite",
    }
    assert variant_programs(row) == ["SELECT 1", "summary = execute_sql('SELECT 1', 'o.csv')"]
    wrapped = as_python("SELECT 1", "sql", 2)
    assert "execute_sql(sql='SELECT 1', output_path='hop2_result.csv')" in wrapped
    assert describe_program(wrapped) == "sql-tool"
    assert as_python("print(3)", "python", 1) == "print(3)"


def test_localize_points_absolute_paths_at_the_session_copy():
    prog = "DATA_PATH = '/data/staged/ab/sales.csv'\nimport pandas as pd\ndf = pd.read_csv(DATA_PATH)"
    assert localize(prog, ["/data/staged/ab/sales.csv"], "sales.csv") == prog.replace(
        "/data/staged/ab/sales.csv", "sales.csv"
    )


def test_printed_value_drops_warning_reports_but_keeps_the_print():
    out = (
        "<cell>:3: Pandas4Warning: engine will change.\n  df = pd.read_excel('b.xlsx')\n"
        "/x/y.py:10: FutureWarning: something\n  warnings.warn(msg)\n"
        "2476\n  indented result line\n"
    )
    assert printed_value(out) == "2476\n  indented result line"
    assert printed_value("  42\n") == "42"
