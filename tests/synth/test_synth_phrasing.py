"""Question polish: no doubled words, and the answer format stated once."""

from __future__ import annotations

import re

import pytest

from datamind.phrasing import _FORMATS, answer_form_problem, answer_kind, polish_question, undouble


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Which quantity has the highest average total Total?", "Which quantity has the highest average Total?"),
        ("What is the total total of sales?", "What is the total of sales?"),
        ("Which region has the most records?", "Which region has the most records?"),
        ("Is the mean of x x larger?", "Is the mean of x larger?"),
    ],
)
def test_doubled_words_are_removed(question, expected):
    assert undouble(question) == expected


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ("42", "number"),
        ("-3.5", "number"),
        ("1,080", "number"),
        ("12.5%", "number"),
        ("yes", "yesno"),
        ("False", "yesno"),
        ("East", "label"),
        ("East, 12", "list"),
        ("a, 1; b, 2", "list"),
    ],
)
def test_answer_kinds(answer, kind):
    assert answer_kind(answer) == kind


def test_the_format_is_stated_once_and_matches_the_answer():
    q = polish_question("What is the average Revenue?", "1234.5")
    assert q.startswith("What is the average Revenue? ") and "number" in q
    assert "yes" in polish_question("Is the average Revenue above 100?", "yes").lower()
    already = "What are the minimum, maximum and mean of x? Give them in that order, separated by commas."
    assert polish_question(already, "1, 2, 3") == already
    assert polish_question(q, "1234.5") == q  # idempotent: never a second format sentence


def test_a_question_of_a_database_names_its_table():
    from datamind.phrasing import final_ask, scope_question, unscoped

    scope = ("table", "orders")
    assert scope_question("What is the median quantity?", scope) == "In the orders table, what is the median quantity?"
    assert (
        scope_question("How many rows and columns does the table have?", scope)
        == "How many rows and columns does the orders table have?"
    )
    # a question opening with a column name keeps its spelling
    assert scope_question("Quantity above 3: how many?", scope, ["Quantity"]) == (
        "In the orders table: Quantity above 3: how many?"
    )
    assert scope_question("What is the median quantity?", None) == "What is the median quantity?"
    chain = scope_question("First, compute the median total. Then count the orders above it.", scope)
    assert chain.startswith("In the orders table, first, compute")
    assert unscoped(chain).startswith("First, compute") and final_ask(chain) == "Then count the orders above it."


def test_the_answer_form_check_catches_what_the_read_found():
    from datamind.phrasing import answer_form_problem

    assert "whole number" in answer_form_problem("How many records have city equal to 'Lyon'?", "346.0")
    assert answer_form_problem("How many records have city equal to 'Lyon'? Reply with just the number.", "346") is None
    assert "yes or no" in answer_form_problem("Which remote appears most often? Reply with yes or no.", "Yes")
    assert "asks yes or no" in answer_form_problem("Is the mean above 5? Answer yes or no.", "5.2")
    assert answer_form_problem("Is the mean price above 5? Answer yes or no.", "No") is None
    assert answer_form_problem("Is the mean of north or of south higher?", "north") is None  # a choice, not a verdict
    assert "comma" in answer_form_problem("List the three regions. Give all the values, comma-separated.", "a; b; c")
    assert "a list" in answer_form_problem("Which regions lead? Give all the values, comma-separated.", "north")
    assert "2 decimal" in answer_form_problem("What is the mean, rounded to 2 decimals?", "3.14159")
    assert "rounded away" in answer_form_problem("What is the Shapiro-Wilk p-value of price?", "0.0")
    verdict = (
        "Is price normal by Shapiro-Wilk? Report the p-value and the verdict. List the values separated by commas."
    )
    assert "rounded away" in answer_form_problem(verdict, "0.0, not normal")
    assert answer_form_problem(verdict, "1.2e-05, not normal") is None
    assert "sentence" in answer_form_problem("What is the mean price?", "The mean price is 12.5 euros.")
    said = "The department with the highest average salary is Engineering with an average salary of 82186.14"
    assert "sentence" in answer_form_problem("Which department has the highest average salary_eur?", said)
    assert answer_form_problem("Which film has the most records?", "The Lord of the Rings") is None  # a title
    assert (
        answer_form_problem("Which year has the most records? Reply with that value, spelled as in the data.", "2023")
        is None
    )


def test_every_offline_question_is_answered_in_the_form_it_asks(root, small_csv, small_sqlite):
    """One check over every template and every chain step: each question the offline engine writes, with the
    format sentence it ends with, is answered by its reference in that form. A question whose answer is one
    value never asks for a list (a skewness question once ended "List the values separated by commas." for one
    number and its label); a list asked for holds values of one kind (all numbers or all names), so an answer
    of a value and its count, or a number and a label, is asked for one answer per part."""
    from synth_fixtures import catalog_rows

    from datamind.phrasing import answer_form_problem
    from datamind.synth.params import SynthParams
    from datamind.synth.table import synthesize_table_offline

    number = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?%?")
    checked, forms = 0, {}
    for path in (small_csv, small_sqlite):
        for row in catalog_rows(path):
            out = synthesize_table_offline(root, row, SynthParams(queries_per_category=20, n_chains=12), run_id="r")
            for q in out.rows + [r for chain in out.chain_rows for r in chain]:
                question, answer = q["question"], q["reference_answer"].strip()
                assert answer_form_problem(question, answer) is None, (question, answer)
                form = next((k for k, opts in _FORMATS.items() if any(question.endswith(o) for o in opts)), "own")
                parts = [p.strip() for p in re.split(r"[;,] ", answer)]
                if len(parts) == 1:
                    assert form not in ("list", "parts"), (question, answer)
                if form == "list":
                    assert len({bool(number.fullmatch(p)) for p in parts}) == 1, (question, answer)
                checked += 1
                forms.setdefault(q["template_version"].rsplit("/", 1)[1], set()).add(form)
    assert checked > 100 and len(forms) > 50
    # (the templates that ask two things, read from their wording: a value and a verdict, a value and its count)
    asks_two = ("dist_skew", "desc_mode", "prep_onehot", "desc_shape_missing")
    assert all(forms[t] == {"parts"} for t in asks_two), {t: forms.get(t) for t in asks_two}


def test_a_question_that_asks_two_things_is_asked_for_one_answer_per_part():
    # a skewness question ended "List the values separated by commas." for one number and its label
    from datamind.phrasing import answer_form_problem, polish_question

    q = polish_question(
        "What is the skewness of units, and is its distribution right-skewed (above 0.5), left-skewed (below -0.5) "
        "or roughly symmetric?",
        "0.068, roughly symmetric",
    )
    tail = q.rsplit("?", 1)[1]
    assert "values" not in tail and ("part" in tail or "in order" in tail), tail
    assert answer_form_problem(q, "0.068, roughly symmetric") is None
    assert "one answer per part" in answer_form_problem(q, "0.068")
    # the audit's form check finds the old wording in a published question
    listed_parts = q.rsplit("?", 1)[0] + "? List the values separated by commas."
    assert "asks two things" in answer_form_problem(listed_parts, "0.068, roughly symmetric")
    listed = polish_question("Which three regions have the largest total?", "north, south, east")
    assert listed.rsplit("?", 1)[1].strip() in (
        "List the values separated by commas.",
        "Give all the values, comma-separated.",
        "Reply with the values in a comma-separated list.",
    )


def test_a_choice_between_groups_labelled_yes_and_no_is_not_asked_as_a_verdict():
    # a published question ended "Reply with yes or no." for a choice between the groups Married 'Yes' and 'No'
    from datamind.phrasing import answer_form_problem, polish_question

    program = "ma = df.loc[df['Married'] == 'Yes', 'x'].median()\nmb = 1\nanswer = 'Yes' if ma > mb else 'No'"
    q = polish_question("Between Married 'Yes' and Married 'No', which has the higher median x?", "Yes", None, program)
    assert "yes or no" not in q.lower() and "yes/no" not in q.lower(), q
    assert answer_form_problem(q, "Yes") is None
    verdict = polish_question("Is the median x of Married 'Yes' higher?", "Yes", None, program)
    assert "yes" in verdict.rsplit("?", 1)[1].lower(), verdict  # a verdict asked for is still asked as one


@pytest.mark.parametrize(
    "program, kind",
    [
        ("answer = df.loc[df['pop'].idxmax(), 'state']\nprint(answer)", "label"),  # one value from the data
        ("answer = ', '.join(str(x) for x in top['state'])\nprint(answer)", "list"),  # put together from several
        ('answer = f"{first}, {second}"\nprint(answer)', "list"),
        ("print(list(df['state'].unique()))", "list"),  # a model's list, printed as Python writes one
        ("execute_sql(sql='SELECT state FROM t ORDER BY pop DESC LIMIT 1', output_path='a.csv')\n"
         "answer = pd.read_csv('a.csv').iat[0, 0]\nprint(answer)", "label"),
        ("SELECT a || ', ' || b FROM t", "list"),
        (None, "list"),  # without its program a comma reads as a list, as before
    ],
)  # fmt: skip
def test_one_value_holding_a_comma_is_a_label_where_its_program_prints_one_value(program, kind):
    assert answer_kind("Washington, D.C.", program) == kind
    asked_label = "Which state has the largest population? Answer with the value as it is written in the data."
    problem = answer_form_problem(asked_label, "Washington, D.C.", program)
    assert (problem is None) is (kind == "label"), problem
    if program is not None:  # the question the offline engine writes asks for the form the program prints
        polished = polish_question("Which state has the largest population?", "Washington, D.C.", program=program)
        assert (
            polished.endswith("in the data.") or "data writes it" in polished
            if kind == "label"
            else "comma" in polished
        )
