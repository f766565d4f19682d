"""Question polish: no doubled words, and the answer format stated once."""

from __future__ import annotations

import pytest

from datamind.synth.offline.phrasing import answer_kind, polish_question, undouble


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
    from datamind.synth.offline.phrasing import final_ask, scope_question, unscoped

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
