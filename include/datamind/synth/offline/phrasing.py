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
# A program that decides a claim writes its verdict as these literals (pandas or SQL): only then is the
# answer a yes or no. A "Yes" read from the data (the top value of a Yes/No column) is a value, not a verdict.
_DECIDES = re.compile(r"'Yes'\s+if\b|\bTHEN\s+'Yes'\s+ELSE\s+'No'", re.IGNORECASE)

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


def answer_kind(answer: str, program: str | None = None) -> str:
    """The form of ``answer``; with the ``program`` that computed it, a yes or no only where the program
    decides one (the question asks for a verdict), never because a value read from the data spells one."""
    a = answer.strip()
    if a.lower() in ("yes", "no", "true", "false") and (program is None or _DECIDES.search(program)):
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


_UNIT = re.compile(
    r"(€|\$|£|\beuros?\b|\bdollars?\b|\busd\b|\beur\b|\bpercent\b|%|\bkg\b|\bkilo|\bgrams?\b|\bkm\b|"
    r"\bmeters?\b|\bmetres?\b|\bmiles?\b|\bseconds?\b|\bminutes?\b|\bhours?\b|\bdays?\b|\bweeks?\b|"
    r"\bmonths?\b|\byears?\b|°|\bcelsius\b|\bfahrenheit\b|\blit(?:er|re)s?\b|\bunits\b)",
    re.IGNORECASE,
)


def glossary(column_profiles) -> dict[str, str]:
    """Column -> what its values mean, for the columns whose description gives a unit or scale (a price in
    euros, a duration in days): the part of the question a reader cannot guess from the name."""
    out: dict[str, str] = {}
    for p in column_profiles or []:
        name, desc = p.get("name"), p.get("description") or ""
        parts = [x.strip() for x in desc.split("|") if x.strip() and not x.strip().startswith("Values:")]
        meaning = next((x for x in parts if _UNIT.search(x)), None)
        if name and meaning and meaning.lower() != str(name).lower():
            out[str(name)] = meaning.rstrip(".")
    return out


def _meaning_note(question: str, terms: dict[str, str]) -> str:
    used = [c for c in terms if re.search(r"(?<![\w])" + re.escape(c) + r"(?![\w])", question)][:2]
    if not used:
        return ""
    return " " + " ".join(f"({c}: {terms[c]}.)" for c in used)


def polish_question(question: str, answer: str, terms: dict[str, str] | None = None, program: str | None = None) -> str:
    q = undouble(question.strip()) + _meaning_note(question, terms or {})
    if _SAYS_FORMAT.search(q) or any(opt in q for opts in _FORMATS.values() for opt in opts):
        return q
    options = _FORMATS[answer_kind(answer, program)]
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


# "In the orders table, what is ...": how a question names its table in a file of several (see scope_question).
_SCOPE = re.compile(r"^In the (?P<name>.+?) (?P<noun>table|sheet)(?:, |: )(?=\S)")
_THE_TABLE = re.compile(r"\bthe (table|sheet|dataset)\b", re.IGNORECASE)


def scope_question(question: str, scope: tuple[str, str] | None, columns=()) -> str:
    """A question about one table of a database (one sheet of a workbook) names that table: "the table"
    becomes "the orders table", else the question opens with "In the orders table, ...". ``columns``:
    names the question may open with (kept as written, never lower-cased)."""
    if scope is None:
        return question
    noun, name = scope
    if re.search(rf"\b{re.escape(name)} {noun}\b", question):
        return question
    if _THE_TABLE.search(question):
        return _THE_TABLE.sub(f"the {name} {noun}", question)
    first = question.split(" ", 1)[0]
    word = first.rstrip(",:;")
    plain_word = word.isalpha() and word[:1].isupper() and word[1:].islower()
    if plain_word and not any(str(c).startswith(word) for c in columns):
        return f"In the {name} {noun}, {first.lower()}{question[len(first) :]}"
    return f"In the {name} {noun}: {question}"


def unscoped(question: str) -> str:
    """``question`` without the table scope :func:`scope_question` put in front."""
    m = _SCOPE.match(question.strip())
    if not m:
        return question.strip()
    rest = question.strip()[m.end() :]
    return rest[:1].upper() + rest[1:] if m.group(0).endswith(", ") else rest


def final_ask(question: str) -> str:
    """What a multi-step question finally asks: the question without the restated steps before it."""
    parts = _SENTENCE.split(unscoped(question))
    while len(parts) > 1 and _STEP_LEAD.match(parts[0]):
        parts.pop(0)
    return " ".join(parts)
