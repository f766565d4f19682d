"""The figures that say how trajectories read (question copies, thought frames, code shapes, pasted literals,
planted typos) and the cell rewrites that keep a session's values in variables."""

from __future__ import annotations

import pytest

from datamind.agent import protocol
from datamind.agent.policies import cells
from datamind.agent.policies.measures import code_shape, copies_question, frame, sample_measures, summarize

QUESTION = "First, find the region with the highest average price. How many records of that region cost more than 20?"


def _row(thinks_codes_outputs, question=QUESTION, hop=2, fmt="csv") -> dict:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": question}]
    for think, code, output in thinks_codes_outputs:
        if code is None:
            messages.append({"role": "assistant", "content": protocol.format_answer_turn(think, output)})
        else:
            messages.append({"role": "assistant", "content": protocol.format_code_turn(think, code)})
            messages.append({"role": "tool", "content": protocol.format_interpreter(output)})
    return {"question": question, "messages": messages, "hop": hop, "data_format": fmt}


def test_a_thought_copies_the_question_from_six_consecutive_words():
    assert copies_question('For "find the region with the highest average price" I group by region.', QUESTION)
    assert not copies_question("The region with the highest mean goes into `top_region`.", QUESTION)
    # a long column name quoted in backticks is the data's name, not the question's wording
    long_name = "What is the median Miles traveled today (midnight to 11:59 pm)?"
    assert not copies_question("First: the median `Miles traveled today (midnight to 11:59 pm)`.", long_name)
    assert copies_question("First: the median Miles traveled today (midnight to 11:59 pm).", long_name)
    assert frame('For "How many records ..." the last cell printed 5.49.') == "for q the last"
    assert frame("85 of 180 rows (47%), and that is it.") == "n of n rows"
    assert code_shape("x = df['a'].mean()\nprint(x)") == code_shape("y = df['price'].mean()\nprint(y)")
    assert code_shape("x = df['a'].mean()") != code_shape("x = df['a'].median()")


def test_a_sample_that_pastes_the_printed_value_and_plants_a_typo_is_measured_as_such():
    old = _row(
        [
            ('For "find the region with the highest average price" I load it.', "print(df.shape)", "(40, 3)"),
            ("Step 1 of 2.", "answer = df.groupby('region')['price'].mean().idxmax()\nprint(answer)", "North"),
            ("Typo.", "print(int((df.loc[df['regions'] == 'North', 'price'] > 20).sum()))", "KeyError: 'regions'"),
            ("Fixed.", "print(int((df.loc[df['region'] == 'North', 'price'] > 20).sum()))", "7"),
            ("The answer.", None, "7"),
        ]
    )
    rank = "top = df.groupby('region')['price'].mean().idxmax()\nprint(top)"
    count = "n = int((df.loc[df['region'] == top, 'price'] > 20).sum())\nprint(n)"
    new = _row(
        [
            ("`price` and `region` first: a plain read of sales.csv.", "print(df.shape)", "(40, 3)"),
            ("40 rows. Ranking regions by mean price.", rank, "North"),
            ("North leads; `top` goes into the filter.", count, "7"),
            ("7 of 40 rows.", None, "7"),
        ]
    )
    m_old, m_new = sample_measures(old), sample_measures(new)
    assert m_old.copied_thinks == 1 and m_old.pasted_literal and m_old.planted_typo
    assert m_new.copied_thinks == 0 and m_new.pasted_literal is False and not m_new.planted_typo
    figures = summarize([old, new])
    assert figures["question_copy_share"] == pytest.approx(1 / 9, abs=1e-3)
    assert figures["pasted_literal_share"] == 0.5 and figures["planted_typo_share"] == 0.5


def test_database_samples_count_helper_functions_and_whole_table_fetches():
    helper = "def run_sql(sql, path):\n    execute_sql(sql=sql, output_path=path)\n    return open(path).read()"
    row = _row(
        [
            ("Schema.", "print(get_db_info())", "Table t (3 rows)"),
            ("Fetch.", helper + "\nprint(run_sql('SELECT * FROM t', 'a.csv'))", "1"),
            ("Done.", None, "1"),
        ],
        hop=1,
        fmt="sqlite",
    )
    m = sample_measures(row)
    assert m.sql_helper_def and m.select_star and m.pasted_literal is None


def test_a_later_cell_takes_the_variable_where_the_literal_is_unambiguous():
    code = "n = int((df['amount'] > 12.5).sum())\nprint(n)"
    assert cells.use_variable(code, "12.5", "median_amount", "value") == code.replace("12.5", "median_amount")
    # a count of 2 next to round(..., 2): which 2 is the count cannot be told, so the cell stays as written
    pct = "answer = round(2 / len(df) * 100, 2)\nprint(answer)"
    assert cells.use_variable(pct, "2", "n_rows", "value") == pct
    assert cells.use_variable("x = df['a'] - 0.25", "0.25", "v", "value") == "x = df['a'] - v"
    assert cells.use_variable("x = df['a'] > -0.25", "-0.25", "v", "text") == "x = df['a'] > float(v)"
    sql = "rows = duckdb.sql('SELECT COUNT(*) FROM df WHERE \"city\" = \\'Lyon\\'').fetchall()"
    assert cells.use_variable(sql, "Lyon", "top_city", "value") == (
        'rows = duckdb.sql(f"""SELECT COUNT(*) FROM df WHERE "city" = \'{top_city}\'""").fetchall()'
    )
    # the SQL the database tool runs binds the value (both places it occurs), cast where it was read as text
    tool = "execute_sql(sql='SELECT COUNT(*) FROM t WHERE city = \\'Lyon\\' OR hub = \\'Lyon\\'', output_path='n.csv')"
    assert cells.use_variable(tool, "Lyon", "top_city", "value") == (
        'execute_sql(sql="""SELECT COUNT(*) FROM t WHERE city = :top_city OR hub = :top_city""", '
        "output_path='n.csv', params={'top_city': top_city})"
    )
    query = 'query = """SELECT COUNT(*) FROM t\nWHERE "v" > 7.5"""\nexecute_sql(sql=query, output_path="n.csv")'
    assert cells.use_variable(query, "7.5", "avg_v", "text") == (
        'query = """SELECT COUNT(*) FROM t\nWHERE "v" > :avg_v"""\n'
        "execute_sql(sql=query, output_path=\"n.csv\", params={'avg_v': float(avg_v)})"
    )
    # a value that is also a column name, or that holds a quote, is left as a literal
    assert cells.use_variable("df['Lyon'] == 'Lyon'", "Lyon", "v", "value", ["Lyon"]) == "df['Lyon'] == 'Lyon'"
    quoted = "x = \"SELECT 1 FROM t WHERE a = 'O''Hara'\""
    assert cells.use_variable(quoted, "O'Hara", "v", "value") == quoted


def test_a_database_result_is_read_back_as_it_was_printed():
    single = cells.sql_cell('SELECT COUNT(*) FROM "t"', "n_rows", "42", import_pandas=True)
    assert single.startswith("import pandas as pd\n") and "n_rows = pd.read_csv('n_rows.csv').iat[0, 0]" in single
    code = cells.sql_cell('SELECT "code" FROM "t" LIMIT 1', "top_code", "007", import_pandas=False)
    assert "dtype=str, keep_default_na=False" in code  # pandas would print 7
    listed = cells.sql_cell('SELECT MIN("a"), MAX("a") FROM "t"', "a_summary", "1.0, 5.0", import_pandas=False)
    assert '"; ".join(", ".join(row)' in listed
    assert not cells.reads_back_exactly("NA") and cells.reads_back_exactly("105392533.6648")


def test_a_whole_table_fetch_is_narrowed_only_when_the_step_uses_named_columns():
    assert cells.uses_only_named_columns("a = df.loc[df['g'] == 'x', 'm'].median()\nb = len(df)")
    assert cells.uses_only_named_columns("rows = duckdb.sql('SELECT COUNT(*) FROM df WHERE \"m\" > 3').fetchall()")
    assert not cells.uses_only_named_columns("clean = df.drop_duplicates()")
    assert not cells.uses_only_named_columns("print(df.shape)")
    assert not cells.uses_only_named_columns("rows = duckdb.sql('SELECT DISTINCT * FROM df').fetchall()")


def test_variables_are_named_after_what_they_hold():
    assert cells.variable_name("Mode of city.", 'SELECT "city" FROM t', ["city"], "London", set()) == "top_city"
    assert cells.variable_name("Median of price.", "x = df['price'].median()", ["price"], "3.5", set()) == (
        "median_price"
    )
    assert cells.variable_name("Tukey fences on price; count the outliers.", "", ["price"], "3", set()) == (
        "n_outliers_price"
    )
    assert cells.variable_name("Mean of price.", "", ["price"], "2.0", {"avg_price"}) == "avg_price_2"


def test_a_column_name_does_not_decide_what_a_value_is_called():
    """The mean of a column called "Percentage" is an average, not a percentage; a column called "a" does not
    hide the word "mean"."""
    sql = 'SELECT ROUND(AVG("Percentage"), 4) FROM "countrylanguage"'
    assert cells.variable_name("Mean of Percentage.", sql, ["Percentage"], "29.2683", set()) == "avg_percentage"
    assert cells.variable_name("Mean of a.", "x = df['a'].mean()", ["a"], "2.5", set()) == "avg_a"


def _synth_descriptions() -> list[str]:
    """Every step description the offline synthesizer writes (the 4th argument of each ``Task(...)`` in its
    templates and chain steps), with each column slot filled by a one-word name."""
    import ast
    from pathlib import Path

    import datamind.synth.offline as offline

    base = Path(offline.__file__).parent
    out = []
    for path in [base / "steps.py", *sorted((base / "templates").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Task" and len(node.args) >= 4:
                d = node.args[3]
                if isinstance(d, ast.JoinedStr):
                    out.append("".join(v.value if isinstance(v, ast.Constant) else "price" for v in d.values))
                elif isinstance(d, ast.Constant) and d.value:
                    out.append(d.value)
    return out


def test_every_step_description_reads_as_a_plan_in_other_words():
    """A thought plans a step in its own words: each description the synthesizer writes has a phrasing, and no
    phrasing repeats four consecutive words of the description it stands for (the wording the read found
    pasted into first thoughts) nor leaves a slot unfilled."""
    from datamind.agent.policies.measures import words
    from datamind.agent.policies.narration import plan_text

    descriptions = _synth_descriptions()
    assert len(descriptions) > 60  # the catalogue was read, not an empty list
    for d in descriptions:
        for seed in ("a", "b", "c", "d"):
            plan = plan_text(d + " Builds on the previous question: find x.", "top_region", seed)
            assert plan is not None, d
            assert "{" not in plan and "previous" not in plan, (d, plan)
            dw, pw = words(d), words(plan)
            runs = {tuple(dw[i : i + 4]) for i in range(len(dw) - 3)}
            assert not any(tuple(pw[i : i + 4]) in runs for i in range(len(pw) - 3)), (d, plan)
    assert plan_text("Count the rows of the region group found by the previous step.", "top_region", "a") in (
        "count the rows whose `region` is `top_region`",
        "see how many records carry `top_region` in `region`",
    )
    assert plan_text("Something no template writes.", None, "a") is None
