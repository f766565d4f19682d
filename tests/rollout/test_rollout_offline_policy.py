"""Helpers of the offline expert: variant choice, path localisation, answer extraction, SQL cells, frame reuse."""

from __future__ import annotations

import asyncio
import re
import sqlite3

from datamind.rollout import protocol
from datamind.rollout.agent import run_agent
from datamind.rollout.policies import narration
from datamind.rollout.policies.offline_expert import (
    HopProgram,
    OfflineExpertPolicy,
    as_python,
    describe_program,
    inspect_code,
    localize,
    printed_value,
    variant_programs,
    without_reading,
)
from datamind.synth.offline.source import Source, default_read_suffices, reading_block


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
    first = as_python("SELECT COUNT(*) FROM t", "sql", 1)
    later = as_python("SELECT MAX(x) FROM t", "sql", 2, helper_defined=True)
    assert describe_program(first) == describe_program(later) == "sql-tool"
    assert as_python("print(3)", "python", 1) == "print(3)"
    assert as_python("print(3)", "sql", 1) == "print(3)"  # Python written for a SQL session stays as it is


def test_a_step_that_reads_no_data_is_not_described_as_reading_it():
    """A yes/no check of the previous result against a threshold reads no data: its thought must not say it
    works on `df` or queries a table."""
    check = "answer = 'Yes' if 27.78 > 50.0 else 'No'\nprint(answer)\n"
    assert describe_program(check) == "arithmetic"
    sql = as_python("SELECT CASE WHEN 25.0 > 50.0 THEN 'Yes' ELSE 'No' END", "sql", 5, helper_defined=True)
    assert describe_program(sql) == "sql-constant"
    assert describe_program(as_python("SELECT COUNT(*) FROM orders", "sql", 2, helper_defined=True)) == "sql-tool"
    assert describe_program("answer = round(26 / len(df) * 100, 2)\nprint(answer)") == "pandas"
    assert describe_program("from math import sqrt\nprint(sqrt(2.0) > 1)") != "arithmetic"  # conservative


def test_sql_steps_define_their_query_helper_once_per_session(sandbox, tmp_path):
    """The first bare SQL step defines the helper that runs a query and prints its rows; later steps only
    call it, in the same real session, and nothing assigns a value it never uses."""
    db = tmp_path / "shop.sqlite"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);"
        "INSERT INTO customers VALUES (1, 'Ada', 'London'), (2, 'Lin', 'Paris'), (3, 'Bo', 'London');"
    )
    con.commit()
    con.close()
    cells = [
        as_python("SELECT city FROM customers GROUP BY city ORDER BY COUNT(*) DESC LIMIT 1", "sql", 1),
        as_python("SELECT COUNT(*) FROM customers WHERE city = 'London'", "sql", 2, helper_defined=True),
        as_python("SELECT name, city FROM customers ORDER BY name", "sql", 3, helper_defined=True),
    ]
    assert cells[0].count("def run_sql(") == 1 and all("def " not in c and "execute_sql" not in c for c in cells[1:])
    assert not any(re.search(r"^\w+ = execute_sql", c, re.MULTILINE) for c in cells)
    with sandbox.session([str(db)], language="sql") as session:
        outputs = [session.run(c) for c in cells]
    assert [o.ok for o in outputs] == [True] * 3, [o.output for o in outputs]
    assert [o.output.strip() for o in outputs] == ["London", "2", "Ada, London; Bo, London; Lin, Paris"]


def test_a_step_after_a_clean_default_read_uses_the_frame_already_loaded():
    """``default_read_suffices``: only a plain read with pandas' default options may be replaced by the first
    look's ``pd.read_csv(file)``; other separators, encodings, header offsets or tidy-up code keep their read."""
    base = {"format": "csv", "sep": ",", "encoding": "utf-8", "quotechar": '"', "decimal": ".", "header_rows": 1}

    def block(options, reader="plain", fmt="csv", name="sales.csv"):
        return reading_block(Source(fmt, name, "", options, reader=reader).python_preamble(), fmt, options, name)

    assert default_read_suffices(block(base), "csv", base, "sales.csv")
    ascii_file = dict(base, encoding="ascii")
    assert default_read_suffices(block(ascii_file), "csv", ascii_file, "sales.csv")
    for change in ({"sep": ";"}, {"encoding": "latin-1"}, {"decimal": ","}, {"header_start": 2}, {"thousands": ","}):
        options = dict(base, **change)
        assert not default_read_suffices(block(options), "csv", options, "sales.csv"), change
    # A program that tidies the frame after a plain read keeps its tidy-up lines; only the read goes.
    tidy = Source("csv", "sales.csv", "", base, reader="tidy").python_preamble() + "print(len(df))\n"
    tidy_block = reading_block(tidy, "csv", base, "sales.csv")
    assert default_read_suffices(tidy_block, "csv", base, "sales.csv")
    kept = without_reading(tidy, tidy_block)
    assert "read_csv" not in kept and "dropna(how='all')" in kept and kept.endswith("print(len(df))\n")
    assert not default_read_suffices(None, "csv", base, "sales.csv")
    sheet = {"format": "xlsx", "sheet": "data", "header_rows": 1}
    assert default_read_suffices(block(sheet, fmt="xlsx", name="b.xlsx"), "xlsx", sheet, "b.xlsx")
    offset = dict(sheet, header_start=3)
    assert not default_read_suffices(block(offset, fmt="xlsx", name="b.xlsx"), "xlsx", offset, "b.xlsx")


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


def test_quotes_in_thoughts_end_on_a_whole_word():
    q = "To begin, find the segment that occurs most often. Then find the most common city among its records."
    assert narration.short(q, 60) == "To begin, find the segment that occurs most often. Then..."
    assert narration.short("3.14159265358979", 10) == "3.14159..."  # one long token: cut inside it
    assert narration.short("short enough", 60) == "short enough"
    assert narration.opening(q, 110) == "To begin, find the segment that occurs most often."
    assert narration.opening("What is the mean of e.g. Sales? Answer with one number.", 110) == (
        "What is the mean of e.g. Sales?"
    )
    assert narration.opening("Is 3.5 above the mean?", 110) == "Is 3.5 above the mean?"


def _two_step_trajectory(sandbox, tmp_path, share_print: str):
    """A real two-step chain on a small CSV: a share in percent, then 'is that share above 50 percent?'."""
    (tmp_path / "sales.csv").write_text(
        "region,amount\n" + "".join(f"r{i},{a}\n" for i, a in enumerate([5, 12, 30, 8, 9, 11, 2]))
    )
    share = "import pandas as pd\ndf = pd.read_csv('sales.csv')\nanswer = round((df['amount'] > 10).mean() * 100, 2)\n"
    hops = [
        HopProgram("What percentage of sales exceed 10?", share + share_print, 1),
        HopProgram(
            "Is that percentage above 50 percent?", "answer = 'Yes' if 42.86 > 50.0 else 'No'\nprint(answer)\n", 2
        ),
    ]
    policy = OfflineExpertPolicy(
        hops=hops,
        inspect=inspect_code("csv", "sales.csv", None),
        data_format="csv",
        file_name="sales.csv",
        variant_label="test",
        blunder_rate=0.0,
        question="First, find the percentage of sales above 10. Is that percentage above 50 percent?",
        settle_threshold=50.0,
    )
    with sandbox.session([str(tmp_path / "sales.csv")]) as session:
        return asyncio.run(run_agent(policy, session.run, system="You analyse data.", user="the question"))


def test_a_threshold_check_of_the_last_number_is_answered_in_words_not_in_a_cell(sandbox, tmp_path):
    """Comparing the previous step's printed number with a fixed threshold needs no code: the answer turn
    names both numbers and the verdict follows from them; no cell compares two literals."""
    result = _two_step_trajectory(sandbox, tmp_path, "print(answer)\n")
    turns = [protocol.strict_turn(m["content"]) for m in result.messages if m["role"] == "assistant"]
    codes = [t.code for t in turns if t.code]
    assert len(codes) == 2 and not any("'Yes' if" in c for c in codes)  # the first look and the share
    assert result.messages[-2]["content"].count("42.86") == 1  # what the share step printed
    assert result.final_answer == "No"
    think = turns[-1].think
    assert "42.86" in think and "50" in think and "not above" in think, think


def test_a_threshold_check_runs_as_a_cell_when_the_last_output_is_not_a_plain_number(sandbox, tmp_path):
    result = _two_step_trajectory(sandbox, tmp_path, "print(f'{answer}%')\n")
    codes = [protocol.strict_turn(m["content"]).code for m in result.messages if m["role"] == "assistant"]
    assert codes[-1] is None and "'Yes' if 42.86 > 50.0" in codes[-2]
    assert result.final_answer == "No" and "<interpreter>\nNo\n</interpreter>" in result.messages[-2]["content"]


def test_a_trailing_delimiter_is_dropped_from_the_frame_not_read_again(sandbox, tmp_path):
    """Lines ending with a delimiter leave an empty 'Unnamed: 3' column. The steps' reading is the default
    one, so re-reading would print the same column while the thought claimed a fix: the expert drops the
    column from the frame it holds and the next output shows it gone (the audit and the rule filter both
    catch a claimed fix that changes nothing)."""
    from datamind.filters.coherence import unchanged_fix

    (tmp_path / "d.csv").write_text("a,b,c,\n" + "".join(f"{i},{i * 2},x{i % 3},\n" for i in range(30)))
    options = {"format": "csv", "sep": ",", "encoding": "utf-8", "quotechar": '"', "decimal": ".", "header_rows": 1}
    program = Source("csv", "d.csv", "", options, reader="tidy").python_preamble() + "\nprint(int(df['b'].sum()))\n"
    fixed = reading_block(program, "csv", options, "d.csv")
    policy = OfflineExpertPolicy(
        hops=[HopProgram("What is the total of b?", program, 1)],
        inspect=inspect_code("csv", "d.csv", None),
        data_format="csv",
        file_name="d.csv",
        variant_label="test",
        fixed_read=fixed,
        reuse_first_read=default_read_suffices(fixed, "csv", options, "d.csv"),
        blunder_rate=0.0,
    )
    with sandbox.session([str(tmp_path / "d.csv")]) as session:
        result = asyncio.run(run_agent(policy, session.run, system="You analyse data.", user="the question"))
    turns = [m["content"] for m in result.messages if m["role"] == "assistant"]
    outputs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "Unnamed: 3" in outputs[0] and "Unnamed: 3" not in outputs[1]  # the fix shows its change
    assert "read_csv" not in turns[1] and "read_csv" not in turns[2]  # no second read of the same file
    thinks = [t.split("</think>")[0] for t in turns]
    assert not unchanged_fix(thinks, outputs) and "870" in outputs[2]
