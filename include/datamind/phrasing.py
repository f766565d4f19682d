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
    # a question that asks several things ("the skewness, and is it right-skewed?") has one answer per part,
    # not a list of values: "List the values" told the model to list values where it had one number and a label
    "parts": (
        "Give each answer in the order asked, separated by commas.",
        "Reply with one answer per part, in order, separated by commas.",
        "Answer each part in turn, separated by commas.",
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
        # one value from the data may hold a comma ("Washington, D.C."): a list is one a program put together
        if program and _prints_one_value(program):
            return "label"
        return "list"
    return "label"


# What a program that prints several values writes: a separator literal (", ".join, "; ".join, || ', ' ||) or
# an f-string placing values side by side ("{rows}, {cols}")
def _prints_one_value(program: str) -> bool:
    """Whether ``program`` prints one value: Python that joins nothing, or a query whose one cell it reads; a
    bare SQL query prints every column of its row, comma-separated."""
    if _JOINS.search(program) or _MANY.search(program):
        return False
    if re.match(r"\s*(?:SELECT|WITH)\b", program, re.IGNORECASE):
        return False
    return "execute_sql" not in program or re.search(r"\.(?:iat|iloc)\[0, ?0\]", program) is not None


# What makes several values: a list, the unique values, a loop, the top rows
_MANY = re.compile(
    r"tolist\(|to_list\(|\blist\(|\bsorted\(|unique\(|\.values\b|\bfor\b|\.items\(|to_string\(|"
    r"nlargest\(|nsmallest\(|\.head\(|\.tail\(|value_counts\(\)\s*\)|\bzip\("
)
_JOINS = re.compile(
    r"""(['"])[,;] ?\1|\}[^'"\n{}]*[,;] [^'"\n{}]*\{|\bprint\([^()\n]*,[^()\n]*\)|GROUP_CONCAT|\|\|""", re.IGNORECASE
)


# ("how many times" asks for a ratio, not a count)
_HOW_MANY = re.compile(r"^(?:how many(?! times)|what is the number of|what number of)\b", re.IGNORECASE)
_ASKS_YES_NO = re.compile(
    r"^(?:is|are|does|do|did|was|were|has|have|can|could)\b|^true or not\b|^check the claim\b|\byes or no\b|"
    r"\byes/no\b",
    re.IGNORECASE,
)
# A question that asks a second thing after its first ("..., and is its distribution ...", "... and how many
# records have it?"): a count is one part of its answer, and its answer is one part per ask, not a list
_COMPOUND = re.compile(r"\band (?:which|what|how|whether|is|are)\b|\brows and columns\b", re.IGNORECASE)
_ASKS_DECIMALS = re.compile(r"\b(?:round(?:ed)? to|to) (\d|one|two|three|four) decimal", re.IGNORECASE)
_ASKS_P_VALUE = re.compile(r"\bp-?value\b", re.IGNORECASE)
_PROSE = re.compile(r"^[A-Z][^\n]*\s[^\n]*[.!]$")
# a sentence that ends on its value, without a full stop ("The department with the highest average salary is
# Engineering with an average salary of 82186.14": a 1.5B model's reference program printed it)
_STATEMENT = re.compile(
    r"^(?:The|There|This|It|That|In|On|Of|For|Among|Across)\b[^\n]*?\s(?:is|are|was|were|has|have)\s"
)
_DIGITS = {"one": 1, "two": 2, "three": 3, "four": 4}


def answer_form_problem(question: str, answer: str, program: str | None = None) -> str | None:
    """Why ``answer`` is not of the form ``question`` asks, or None; one check for every question, offline
    template or model-written. A "how many" is one whole number (not '346.0'); a question that asks yes or no
    is answered Yes or No, and a question that asks for a value does not say "reply with yes or no"; an answer
    is of the form the question's format sentence states; a list asked for with commas has commas, not ';'; a
    number asked for to N decimals has at most N; a p-value is not rounded to 0; no answer is a sentence (a
    program that prints prose teaches the agent to answer in prose, and no judge can compare it). With the
    ``program`` that printed it, one value holding a comma ("Washington, D.C.") is not read as a list."""
    text = answer.strip()
    ask = final_ask(question)
    core = without_format(ask)  # what is asked, without the sentence that says in which form
    stated = next((kind for kind, options in _FORMATS.items() if any(ask.endswith(o) for o in options)), None)
    verdict = text.lower() in ("yes", "no")
    asks_verdict = _ASKS_YES_NO.search(core) is not None and not re.search(r"\bor\b(?! no\b| not\b)", core)
    # a Yes read from the data (the top value of a Yes/No column) is a value, unless a verdict is asked for
    kind = "yesno" if verdict and (stated == "yesno" or asks_verdict) else answer_kind(text, "")
    if kind == "list" and program and _prints_one_value(program):
        kind = "label"  # (one value from the data holding a comma)
    if len(text.split()) >= 5 and (_PROSE.match(text) or _STATEMENT.match(text)):
        return f"the program printed a sentence ({text[:120]!r}): print only the value(s) the question asks for"
    # (a count asked for beside other values - "how many rows and columns, and which column..." - is one part)
    if _HOW_MANY.match(core) and stated in (None, "number") and not _COMPOUND.search(core):
        if kind != "number":
            return f"the question asks how many, and the program printed {text[:120]!r}, not one number"
        if not re.fullmatch(r"[-+]?\d+", text.replace(",", "")):
            return f"the question asks how many, and the program printed {text!r}, not a whole number"
    if asks_verdict and not verdict and stated in (None, "yesno"):  # (a verdict asked for with its p-value: a list)
        return f"the question asks yes or no, and the program printed {text[:120]!r}"
    if stated == "yesno" and not asks_verdict:
        return "the question asks for a value but says to reply with yes or no"
    if stated == "list" and _COMPOUND.search(core):
        return "the question asks two things and says to list values: it asks for one answer per part"
    if stated == "parts" and kind == "list":
        kind = "parts"  # (one answer per part, comma-separated, reads as a list)
    if stated is not None and stated != kind and not (stated == "label" and kind == "number"):
        return f"the question asks for {_FORM_WORDS[stated]}, and the program printed {text[:120]!r}"
    if re.search(r"\bcomma", question, re.IGNORECASE) and ";" in text and ", " not in text:
        return f"the question asks for a comma-separated list, and the program printed {text[:120]!r}"
    places = _ASKS_DECIMALS.search(question)
    if places and kind == "number" and "." in text:
        want = _DIGITS.get(places.group(1).lower()) or int(places.group(1))
        if len(text.split(".")[1].rstrip("%")) > want:
            return f"the question asks for {want} decimal(s), and the program printed {text!r}"
    first = text.split(",")[0].strip()  # a p-value reported with its verdict comes first
    if _ASKS_P_VALUE.search(core) and _NUMBER.match(first) and float(first.rstrip("%")) == 0:
        return f"the question asks for a p-value, and the program printed {text!r}: rounded away to zero"
    return None


_FORM_WORDS = {
    "number": "one number",
    "yesno": "yes or no",
    "label": "a value",
    "list": "a list of values",
    "parts": "one answer per part",
}


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
    kind = answer_kind(answer, program)
    ask = without_format(final_ask(q))
    if kind == "list" and _COMPOUND.search(ask):
        kind = "parts"
    # a choice between two groups labelled Yes and No ("Between Married 'Yes' and Married 'No', which ...?")
    # names a group: its program writes 'Yes' if ... else 'No', yet no verdict is asked
    if kind == "yesno" and re.search(r"\bwhich\b", ask, re.IGNORECASE) and not _ASKS_YES_NO.search(ask):
        kind = "label"
    options = _FORMATS[kind]
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
