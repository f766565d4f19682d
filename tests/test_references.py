"""A reference program computes its answer, and an answer is not known before the analysis (issue 46)."""

from __future__ import annotations

from datamind.references import answer_in_question, planted_answer, planted_in_cells

# The "rows, columns and the column with the most missing values" program that hard-coded 'none' where GNPOld
# had 61 blanks: the check repeated the text it checked, so the wrong answer stayed verified.
OLD_SHAPE_MISSING = "answer = f'{df.shape[0]} rows, {df.shape[1]} columns, none'\nprint(answer)\n"
COMPUTED_SHAPE_MISSING = (
    "missing = df.isna().sum()\n"
    "most = missing.idxmax() if missing.max() > 0 else 'none'\n"
    "answer = f'{df.shape[0]} rows, {df.shape[1]} columns, {most}'\nprint(answer)\n"
)


def test_a_program_that_writes_its_answer_is_caught_in_python_and_sql():
    assert planted_answer(OLD_SHAPE_MISSING, "239 rows, 15 columns, none") == "' columns, none'"
    assert planted_answer("answer = 'Yes'\nprint(answer)", "Yes") == "'Yes'"
    assert planted_answer("print(42)", "42") == "42"
    assert planted_answer("label = 'north'\nanswer = str(label)\nprint(answer)", "north") == "'north'"
    assert planted_answer("SELECT COUNT(*), 'none' FROM t", "12, none", "sql") == "'none'"
    assert planted_answer("WITH r AS (SELECT * FROM t) SELECT 'Rock' FROM r LIMIT 1", "Rock", "sql") == "'Rock'"


def test_a_program_that_decides_filters_or_chooses_computes():
    assert planted_answer(COMPUTED_SHAPE_MISSING, "239 rows, 15 columns, none") is None
    assert planted_answer("answer = 'Yes' if a > b else 'No'\nprint(answer)", "Yes") is None
    assert planted_answer("answer = df.loc[df['g'] == 'north', 'x'].mean()\nprint(answer)", "north") is None
    cands = "cands = ['a', 'b']\nanswer = max(cands, key=lambda m: cors[m])\nprint(answer)"
    assert planted_answer(cands, "b") is None
    case = "SELECT CASE WHEN (SELECT AVG(x) FROM t WHERE g = 'a') > 1 THEN 'Yes' ELSE 'No' END"
    assert planted_answer(case, "Yes", "sql") is None
    assert planted_answer('SELECT "g" FROM t WHERE "g" <> \'north\' GROUP BY 1 LIMIT 1', "north", "sql") is None
    assert planted_answer("SELECT ROUND(100.0 * 57 / COUNT(*), 2) FROM t", "57", "sql") is None
    # a trajectory's cells: the one that prints a literal counts
    assert planted_in_cells(["print(df.shape)", "print('none')"], "none") == "'none'"
    assert planted_in_cells(["print(df.shape)", "x = 'none'\nprint(df.isna().sum().idxmax())"], "none") is None


def test_an_answer_the_question_states_is_known_without_the_data():
    assert answer_in_question("How many records have Pclass equal to 3?", "3")
    assert answer_in_question("Derive a month-number feature (1-12) from date. Which month occurs most often?", "12")
    assert answer_in_question("How many values lie more than 2.0 deviations away?", "2")
    assert not answer_in_question("How many records have Pclass equal to 3?", "216")
    assert not answer_in_question("Between region 'north' and region 'south', which has the higher median?", "north")
    assert not answer_in_question("Among the numeric columns a, b, c, which is most correlated with y?", "b")
    assert not answer_in_question("Is it true that the mean is above 3? Answer yes or no.", "No")
    assert not answer_in_question("In the Q1 Sales sheet, how many stores are there?", "1")
