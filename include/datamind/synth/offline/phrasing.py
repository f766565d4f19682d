"""Final touches to a template question once its answer is known: no doubled words, and the expected
answer format stated, as an analyst asking a colleague would ("a number", "yes or no", "the name")."""

from __future__ import annotations

import hashlib
import re

_DOUBLED = re.compile(r"\b(\w+)(\s+)(\1)\b", re.IGNORECASE)
_SAYS_FORMAT = re.compile(
    r"\b(separated by|give (?:it|them|the)|answer with|answer yes|round(?:ed)? to|in that order|"
    r"as a (?:number|percentage|list)|yes or no)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"^[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?$")

_FORMATS = {
    "number": ("Answer with a single number.", "Reply with just the number.", "The answer is one number."),
    "yesno": ("Answer yes or no.", "Reply with yes or no.", "A yes/no answer is expected."),
    "label": (
        "Answer with the value as it is written in the data.",
        "Reply with that value, spelled as in the data.",
        "Give the value exactly as the data writes it.",
    ),
    "list": (
        "List the values separated by commas.",
        "Give all the values, comma-separated.",
        "Reply with the values in a comma-separated list.",
    ),
}


def answer_kind(answer: str) -> str:
    a = answer.strip()
    if a.lower() in ("yes", "no", "true", "false"):
        return "yesno"
    if _NUMBER.match(a):
        return "number"
    if ";" in a or ", " in a:
        return "list"
    return "label"


def undouble(question: str) -> str:
    """'the highest average total total' -> 'the highest average total' (the later spelling wins: it is
    usually the column's own name)."""
    return _DOUBLED.sub(lambda m: m.group(3), question)


def polish_question(question: str, answer: str) -> str:
    q = undouble(question.strip())
    if _SAYS_FORMAT.search(q) or any(opt in q for opts in _FORMATS.values() for opt in opts):
        return q
    options = _FORMATS[answer_kind(answer)]
    pick = int.from_bytes(hashlib.sha256(q.encode()).digest()[:4], "big") % len(options)
    return f"{q} {options[pick]}"


def without_format(question: str) -> str:
    """The question without the format sentence :func:`polish_question` appended (for parsers of the
    template wording)."""
    for options in _FORMATS.values():
        for opt in options:
            if question.endswith(" " + opt):
                return question[: -len(opt) - 1]
    return question


# How a composed question restates the steps before its ask (see compose.compose_question).
STEP_FIRST = ("First, {}.", "To begin, {}.", "Step one: {}.")
STEP_NEXT = ("Next, {}.", "Then {}.", "After that, {}.")
_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")
_STEP_LEAD = re.compile("^(?:" + "|".join(re.escape(t.split("{}")[0].strip()) for t in STEP_FIRST + STEP_NEXT) + r")\s")


def final_ask(question: str) -> str:
    """What a multi-step question finally asks: the question without the restated steps before it."""
    parts = _SENTENCE.split(question.strip())
    while len(parts) > 1 and _STEP_LEAD.match(parts[0]):
        parts.pop(0)
    return " ".join(parts)
