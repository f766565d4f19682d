"""Parsing the synthesizer's reply: good outputs, and every kind of malformed one."""

from __future__ import annotations

import pytest

from datamind.synth.llm_backend import parse_query_output

GOOD = (
    "<question>Which region has the highest average price?</question>\n"
    "<description>Group by region.</description>\n<type>Ranking</type>"
)


@pytest.mark.parametrize(
    "text, category, expected",
    [
        (
            GOOD,
            "ranking",
            {
                "question": "Which region has the highest average price?",
                "description": "Group by region.",
                "type": "ranking",
            },
        ),
        # chatter around the tags, multi-line question collapsed, type given as the id or in another case
        (
            "Sure! Here you go:\n<question>How many orders\n  were late?</question><description>Count "
            "rows.</description><type>counting</type> Thanks",
            "counting",
            {"question": "How many orders were late?", "description": "Count rows.", "type": "counting"},
        ),
        (
            "<question>What is the skew of x?</question><description>d</description><type>DISTRIBUTION ANALYSIS</type>",
            "distribution_analysis",
            {"question": "What is the skew of x?", "description": "d", "type": "distribution_analysis"},
        ),
        (
            "<question>Is the mean above 3 for x?</question><description>d</description><type>Fact-Checking</type>",
            "fact_checking",
            {"question": "Is the mean above 3 for x?", "description": "d", "type": "fact_checking"},
        ),
    ],
)
def test_good_outputs(text, category, expected):
    assert parse_query_output(text, category) == expected


@pytest.mark.parametrize(
    "text, category, message",
    [
        ("", "ranking", "empty"),
        ("Which region sells most?", "ranking", "question"),  # no tags at all
        ("<question>Which region sells most?</question><type>Ranking</type>", "ranking", "description"),
        ("<question>Which region sells most?</question><description>d</description>", "ranking", "type"),
        (
            "<question>Which region sells most?<description>d</description><type>Ranking</type>",
            "ranking",
            "question",
        ),  # unclosed
        ("<question>  </question><description>d</description><type>Ranking</type>", "ranking", "empty"),
        ("<question>Why?</question><description>d</description><type>Ranking</type>", "ranking", "length"),
        (
            "<question>" + "x" * 1200 + "</question><description>d</description><type>Ranking</type>",
            "ranking",
            "length",
        ),
        (GOOD, "counting", "expected 'Counting'"),  # wrong category
        (
            "<question>Which region sells most?</question><question>And "
            "second?</question><description>d</description><type>Ranking</type>",
            "ranking",
            "several",
        ),
    ],
)
def test_malformed_outputs_raise_value_error_with_reason(text, category, message):
    with pytest.raises(ValueError, match=message):
        parse_query_output(text, category)


def test_none_output_is_malformed_not_a_crash():
    with pytest.raises(ValueError):
        parse_query_output(None, "ranking")  # type: ignore[arg-type]
