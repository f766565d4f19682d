"""Whether a reference program computes its answer, and whether an answer was known before any analysis.

A reference program is the ground truth a trajectory is verified against. One that writes its answer as a
literal (``answer = f'{df.shape[0]} rows, {df.shape[1]} columns, none'``) verifies itself: a wrong answer stays
"verified" because the check repeats the text it checks (24 of 31 "column with the most missing values"
samples hard-coded ``none``, 3 of them wrong). :func:`planted_answer` finds such a literal: one that flows into
the printed answer unconditionally (assigned to ``answer``, printed, or the last expression), as the whole
answer or as one of its comma-separated parts. A literal that is one branch of a decision (``'Yes' if a > b
else 'No'``, ``CASE WHEN ... THEN 'a' ELSE 'b' END``), a filter value or a list of candidates is computed with.

An answer is *known without the data* when it is written in the question (a number the question states that
is not a choice it offers): :func:`answer_in_question`. Synthesis rejects both with their reason; the rule
filters drop a trajectory whose code plants its final answer; the release audit counts what slips through.
"""

from __future__ import annotations

import ast
import re

LITERAL_ANSWER = "literal_answer"
ANSWER_IN_QUESTION = "answer_in_question"
ANSWER_IS_ROW_COUNT = "answer_is_row_count"
FIXED_BY_CONSTRUCTION = "fixed_by_construction"
CHAIN_LOOP = "chain_loop"
ANSWER_FORM_MISMATCH = "answer_form_mismatch"  # the answer is not of the form its question asks (phrasing)

_PARTS = re.compile(r"\s*[,;]\s*")
_CONVERSIONS = {"str", "int", "float", "round", "repr", "format"}
_SQL_STRING = re.compile(r"'((?:[^']|'')*)'")
_SQL_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def _parts(text: str) -> list[str]:
    return [p for p in _PARTS.split(text.strip()) if p]


def _number(text: str) -> float | None:
    try:
        value = (
            float(text.replace(",", "")) if re.fullmatch(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?", text) else None
        )
    except ValueError:
        return None
    return value


def _matches(literal: object, answer: str) -> bool:
    """Whether a literal states the answer or one of its comma-separated parts."""
    parts = _parts(answer)
    if isinstance(literal, bool):
        return False
    if isinstance(literal, (int, float)):
        return any(_number(p) == float(literal) for p in parts)
    if not isinstance(literal, str):
        return False
    wanted = {p.casefold() for p in parts} | {answer.strip().casefold()}
    pieces = {p.casefold() for p in _parts(literal)} | {literal.strip().casefold()}
    return bool((pieces - {""}) & wanted)


class _Flow:
    """The literals that reach a Python program's output without a decision or a computation between."""

    def __init__(self, tree: ast.Module) -> None:
        assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(node.value)
        # a name bound once, at the top level of the program, stands for its value
        top = {id(stmt.value) for stmt in tree.body if isinstance(stmt, (ast.Assign, ast.AnnAssign))}
        self.values = {name: vs[0] for name, vs in assigned.items() if len(vs) == 1 and id(vs[0]) in top}
        self.tree = tree

    def outputs(self) -> list[ast.expr]:
        """What the program prints: top-level assignments to ``answer``, ``print`` arguments and the last
        bare expression (a notebook cell shows it)."""
        out: list[ast.expr] = []
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "answer" for t in stmt.targets):
                out.append(stmt.value)
            elif isinstance(stmt, ast.Expr):
                call = stmt.value
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
                    out.extend(call.args)
                elif stmt is self.tree.body[-1]:
                    out.append(call)
        return out

    def literals(self, node: ast.expr, depth: int = 0) -> list[object]:
        if depth > 8:
            return []
        if isinstance(node, ast.Constant):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            out: list[object] = []
            for v in node.values:
                out += [v.value] if isinstance(v, ast.Constant) else self.literals(v, depth + 1)
            return out
        if isinstance(node, ast.FormattedValue):
            return self.literals(node.value, depth + 1)
        if isinstance(node, ast.Name):
            value = self.values.get(node.id)
            return self.literals(value, depth + 1) if value is not None else []
        if isinstance(node, (ast.Tuple, ast.List)):
            return [x for e in node.elts for x in self.literals(e, depth + 1)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_text(node):
            return self.literals(node.left, depth + 1) + self.literals(node.right, depth + 1)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _CONVERSIONS
            and node.args
        ):
            return self.literals(node.args[0], depth + 1)
        return []  # a decision, a lookup or a computation: what comes out is computed


def _is_text(node: ast.BinOp) -> bool:
    sides = (node.left, node.right)
    return any(
        isinstance(s, ast.JoinedStr) or (isinstance(s, ast.Constant) and isinstance(s.value, str)) for s in sides
    )


def _sql_select_list(sql: str) -> str:
    """The outermost select list of the last statement, with CASE expressions and parentheses taken out."""
    statement = [s for s in sql.split(";") if s.strip()][-1:] or [""]
    text = _SQL_STRING.sub(lambda m: "'" + m.group(1).replace("(", "\x01").replace(")", "\x02") + "'", statement[0])
    while True:  # innermost parentheses first: subqueries, function calls
        stripped = re.sub(r"\([^()]*\)", " ", text)
        if stripped == text:
            break
        text = stripped
    text = re.sub(r"\bCASE\b.*?\bEND\b", " ", text, flags=re.IGNORECASE | re.DOTALL)
    selects = list(
        re.finditer(r"\bSELECT\b(.*?)(?=\bFROM\b|\bWHERE\b|\bGROUP\b|\bORDER\b|\bLIMIT\b|$)", text, re.I | re.S)
    )
    return selects[-1].group(1) if selects else ""


def planted_answer(program: str, answer: str, lang: str = "python") -> str | None:
    """The literal through which ``program`` states ``answer`` instead of computing it, or None."""
    if not program or not (answer or "").strip():
        return None
    if lang == "sql":
        return _planted_in_sql(program, answer)
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return _planted_in_sql(program, answer) if re.match(r"\s*(WITH|SELECT)\b", program, re.I) else None
    flow = _Flow(tree)
    for expr in flow.outputs():
        for literal in flow.literals(expr):
            if _matches(literal, answer):
                return repr(literal)
    return None


def _planted_in_sql(sql: str, answer: str) -> str | None:
    select = _sql_select_list(sql)
    for m in _SQL_STRING.finditer(select):
        literal = m.group(1).replace("''", "'").replace("\x01", "(").replace("\x02", ")")
        if _matches(literal, answer):
            return repr(literal)
    for m in _SQL_NUMBER.finditer(_SQL_STRING.sub(" ", select)):
        if _matches(float(m.group(0)), answer):
            return m.group(0)
    return None


_TOKEN = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w]|\.\d)")
_VERDICTS = {"yes", "no", "true", "false"}


def answer_in_question(question: str, answer: str) -> bool:
    """Whether the question states its own answer: the whole answer written in it (a number among its words,
    or a quoted value) where it is not one of the options the question offers to choose from ("between 'north'
    and 'south'", "yes or no")."""
    a = (answer or "").strip()
    if not a or a.casefold() in _VERDICTS or "," in a or ";" in a:
        return False
    value = _number(a)
    if value is not None:
        return any(float(t) == value for t in _TOKEN.findall(question))
    # a value reads quoted in a question ('north'); unquoted, the same letters are prose ("a", "Total")
    found = re.search(r"'" + re.escape(a) + r"'", question)
    if found is None:
        return False
    around = question[max(0, found.start() - 12) : found.end() + 12]
    quoted = re.findall(r"'[^']+'", question)
    offered = len(quoted) >= 2 and f"'{a}'" in quoted
    listed = re.search(
        r"(,|\bor\b|\band\b|\bbetween\b)\s*'" + re.escape(a) + r"'|'" + re.escape(a) + r"'\s*(,|\bor\b|\band\b)", around
    )
    return not (offered or listed)


def planted_in_cells(codes: list[str], answer: str) -> str | None:
    """The literal through which one of a trajectory's code cells states the final answer, or None: a cell
    that prints the answer it was meant to compute teaches a model to write answers, not to find them."""
    for code in codes:
        literal = planted_answer(code, answer)
        if literal is not None:
            return literal
    return None


# A threshold check (``synth.offline.steps``: 'Is the previous result above 50 percent?') as its programs are
# written: its answer follows from the previous result alone.
_LITERAL = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


_PY_CHECK = rf"answer = 'Yes' if {_LITERAL} > {_LITERAL} else 'No'"


_SQL_CHECK = rf"SELECT CASE WHEN {_LITERAL} > {_LITERAL} THEN 'Yes' ELSE 'No' END"


# Anywhere in a cell: what the release audit counts (a comparison of two numbers run as code).
LITERAL_CHECK = re.compile(rf"{_PY_CHECK}|{_SQL_CHECK}")


_ENDS_WITH_CHECK = (
    re.compile(rf"^{_PY_CHECK}\nprint\(answer\)\s*\Z", re.MULTILINE),
    re.compile(rf"\b{_SQL_CHECK}\s*\Z"),
)


def threshold_check(program: str) -> tuple[float, float] | None:
    """(value, threshold) when ``program`` ends by answering Yes/No on whether one number literal exceeds
    another, as ``synth.offline.steps`` writes its threshold checks (Python, or SQL whose relation it never reads): the
    answer then follows from the previous result alone, and an analyst settles it without running code."""
    for pattern in _ENDS_WITH_CHECK:
        m = pattern.search(program)
        if m:
            return float(m.group(1)), float(m.group(2))
    return None
