"""Table-driven parsing of tagged model output: good replies, real-world sloppiness, garbage and None."""

from __future__ import annotations

import pytest

from datamind.llm.tags import (
    TagParseError,
    extract_all,
    extract_choice,
    extract_code,
    extract_optional,
    extract_tag,
    extract_tags,
    strip_code_fences,
)

GOOD = [
    ("<answer>42</answer>", {}, "42"),
    ("  <answer>\n  42 \n</answer>  ", {}, "42"),
    ("Thinking first.\n<answer>Paris</answer>\nDone.", {}, "Paris"),
    ("<ANSWER>case</Answer>", {}, "case"),
    ('<answer type="number">7</answer>', {}, "7"),
    ("<answer>a</answer> then <answer>b</answer>", {}, "a"),
    ("<answer>a</answer> then <answer>b</answer>", {"occurrence": "last"}, "b"),
    # a tag mentioned in prose before the real block must not swallow it
    ("I will put it in <answer> tags. <answer>42</answer>", {}, "42"),
    # stray closing tag before the block is ignored
    ("</answer> noise <answer>x</answer>", {}, "x"),
    # nested: first occurrence is the outer block, XML-style
    ("<answer>out <answer>in</answer> tail</answer>", {}, "out <answer>in</answer> tail"),
    ("<answer>out <answer>in</answer> tail</answer>", {"occurrence": "last"}, "in"),
    ("<answer>multi\nline\ntext</answer>", {}, "multi\nline\ntext"),
    ("<answer>cut by a stop sequence", {"allow_unclosed": True}, "cut by a stop sequence"),
    ("<answer>closed</answer><answer>open", {"allow_unclosed": True}, "closed"),
    ("<answer></answer>", {"allow_empty": True}, ""),
    ("<answer>  spaced  </answer>", {"strip": False}, "  spaced  "),
    ("<answer>x < y and y > z</answer>", {}, "x < y and y > z"),
    ("<answers>no</answers><answer>yes</answer>", {}, "yes"),
]


@pytest.mark.parametrize(("text", "kwargs", "expected"), GOOD)
def test_extract_tag_good(text, kwargs, expected):
    assert extract_tag(text, "answer", **kwargs) == expected


BAD = [
    (None, {}, "no_text"),
    (123, {}, "no_text"),
    (b"<answer>bytes</answer>", {}, "no_text"),
    ("", {}, "no_text"),
    ("   \n\t ", {}, "no_text"),
    ("just prose, no tags at all", {}, "missing"),
    ("{'answer': 42}", {}, "missing"),
    ("<answ er>42</answ er>", {}, "missing"),
    ("</answer>only closing</answer>", {}, "missing"),
    ("<answers>plural is another tag</answers>", {}, "missing"),
    ("<answer>never closed", {}, "unclosed"),
    ("<answer></answer>", {}, "empty"),
    ("<answer>   \n </answer>", {}, "empty"),
    ("<answer>", {"allow_unclosed": True}, "empty"),
    ("\x00\xff<<<>>>garbage<<answer", {}, "missing"),
]


@pytest.mark.parametrize(("text", "kwargs", "code"), BAD)
def test_extract_tag_bad(text, kwargs, code):
    with pytest.raises(TagParseError) as info:
        extract_tag(text, "answer", **kwargs)
    assert info.value.code == code
    assert isinstance(info.value, ValueError)  # chat_parsed retries on ValueError


def test_extract_all_in_document_order():
    text = "<q>one</q> x <q>two</q> <q>three"
    assert extract_all(text, "q") == ["one", "two"]
    assert extract_all("nothing", "q") == []
    with pytest.raises(TagParseError):
        extract_all(None, "q")


def test_extract_tags_required_and_optional():
    text = "<question>How many rows?</question><solution>len(df)</solution>"
    got = extract_tags(text, ["question", "solution"], optional=["answer"])
    assert got == {"question": "How many rows?", "solution": "len(df)", "answer": None}
    with pytest.raises(TagParseError) as info:
        extract_tags(text, ["question", "answer"])
    assert (info.value.code, info.value.tag) == ("missing", "answer")


def test_extract_optional_still_rejects_broken_tags():
    assert extract_optional("no tag here", "answer") is None
    with pytest.raises(TagParseError):
        extract_optional("<answer>open", "answer")


CODE = [
    ("<code>print(1)</code>", "print(1)"),
    (
        "<code>\n```python\nimport pandas as pd\nprint(pd.__version__)\n```\n</code>",
        "import pandas as pd\nprint(pd.__version__)",
    ),
    ("<code>```\nx = 1\n```</code>", "x = 1"),
    ("<code>```py\nfor i in range(3):\n    print(i)\n```</code>", "for i in range(3):\n    print(i)"),
    # indentation inside the block is kept; trailing spaces are not
    ("<code>\nif x:  \n    y = 2\n</code>", "if x:\n    y = 2"),
    # a fence only on one side is not a fence: keep the text as written
    ("<code>```python\nx = 1</code>", "```python\nx = 1"),
    ("Thought: load it.\n<code>df = pd.read_csv('a.csv')</code>\n", "df = pd.read_csv('a.csv')"),
]


@pytest.mark.parametrize(("text", "expected"), CODE)
def test_extract_code(text, expected):
    assert extract_code(text) == expected


def test_extract_code_unclosed_when_stop_sequence_cut_it():
    assert extract_code("<code>```python\nprint(2)\n```", allow_unclosed=True) == "print(2)"
    with pytest.raises(TagParseError) as info:
        extract_code("<code>```python\n```</code>")
    assert info.value.code == "empty"


def test_strip_code_fences_leaves_plain_code():
    assert strip_code_fences("x = 1") == "x = 1"
    assert strip_code_fences("```sql\nSELECT 1\n```") == "SELECT 1"


CHOICES = [
    ("<verdict>correct</verdict>", "correct"),
    ("<verdict> Correct. </verdict>", "correct"),
    ("Maybe <verdict>incorrect</verdict>... no wait <verdict>CORRECT</verdict>", "correct"),
]


@pytest.mark.parametrize(("text", "expected"), CHOICES)
def test_extract_choice(text, expected):
    assert extract_choice(text, "verdict", ["correct", "incorrect"]) == expected


@pytest.mark.parametrize(
    ("text", "code"),
    [("<verdict>probably</verdict>", "bad_choice"), (None, "no_text"), ("verdict: correct", "missing")],
)
def test_extract_choice_rejects(text, code):
    with pytest.raises(TagParseError) as info:
        extract_choice(text, "verdict", ["correct", "incorrect"])
    assert info.value.code == code


def test_invalid_tag_name_is_a_programming_error():
    with pytest.raises(ValueError, match="invalid tag name"):
        extract_tag("<a>b</a>", "a>b")
