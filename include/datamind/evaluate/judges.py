"""Verdicts on an agent's answer, each naming the judge that gave it.

Rule judges need no LLM: DABench's ``@name[value]`` matcher (every sub-answer must match, as InfiAgent
scores it), the paper's 3% numeric rule for free-form answers (``agent.answer.RuleAnswerJudge``), and
row-set equality for text-to-SQL (the agent's last query against the gold SQL, both run read-only on
the benchmark's database). The model-as-judge (``agent.answer.LLMAnswerJudge``) can replace the
free-form rule when a judge endpoint is configured.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

from datamind.agent import protocol
from datamind.sandbox.sqltools import ReadOnlyDatabase, SqlToolError

_AT_ANSWER = re.compile(r"@([A-Za-z_][\w]*)\[(.*?)\]", re.DOTALL)
_FAILED_CELL = re.compile(r"^(Error|Execution [^\n]*)(:\n|$)")
DABENCH_TOL = 1e-6  # InfiAgent's matcher: string equality, or floats closer than this


@dataclass(frozen=True)
class Verdict:
    correct: bool
    judge: str
    reasoning: str


def parse_at_answers(text: str | None) -> dict[str, str]:
    """``@name[value]`` pairs of an answer; a name given twice keeps its last value (the final statement)."""
    return {name: value.strip() for name, value in _AT_ANSWER.findall(text or "")}


def _same_value(got: str, want: str) -> bool:
    if got.strip().lower() == want.strip().lower():
        return True
    try:
        return math.isclose(float(got), float(want), rel_tol=0.0, abs_tol=DABENCH_TOL)
    except ValueError:
        return False


def judge_dabench(answer: str | None, labels: list[list[str]]) -> Verdict:
    got = parse_at_answers(answer)
    if not got:
        return Verdict(False, "rule:dabench", "no @name[value] answer found")
    misses = []
    for name, want in labels:
        if name not in got:
            misses.append(f"@{name} missing")
        elif not _same_value(got[name], want):
            misses.append(f"@{name}: {got[name]!r} != {want!r}")
    if misses:
        return Verdict(False, "rule:dabench", "; ".join(misses)[:500])
    return Verdict(True, "rule:dabench", f"all {len(labels)} sub-answers match")


# -- text-to-SQL -------------------------------------------------------------------------------


def _literal(node: ast.AST, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def sql_calls(code: str) -> list[str]:
    """The SQL text of each ``execute_sql`` call in a Python cell, where it is a literal or a variable
    assigned a literal in the same cell."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names: dict[str, str] = {}
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _literal(node.value, names)
            if value is not None:
                names[node.targets[0].id] = value
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "execute_sql"]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):  # in the order the cell runs them
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "sql"), None)
        sql = _literal(arg, names) if arg is not None else None
        if sql:
            out.append(sql)
    return out


def last_sql(messages: list[dict]) -> str | None:
    """The last query the agent ran successfully (a cell whose output was not an error)."""
    found = None
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        turn = protocol.parse_turn(protocol.clip_reply(m["content"]))
        if not turn.code or i + 1 >= len(messages):
            continue
        output = protocol.interpreter_body(messages[i + 1]["content"]) or ""
        if _FAILED_CELL.match(output):  # observation_text labels every failed execution
            continue
        calls = sql_calls(turn.code)
        if calls:
            found = calls[-1]
    return found


def _rows(db: ReadOnlyDatabase, sql: str) -> set[tuple]:
    _, rows = db.query(sql)
    return {tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows}


def judge_sql(messages: list[dict], gold_sql: str, db_path: str, timeout_s: float = 30.0) -> Verdict:
    sql = last_sql(messages)
    if sql is None:
        return Verdict(False, "rule:sql_rows", "the agent ran no query with execute_sql")
    db = ReadOnlyDatabase(db_path, timeout_s=timeout_s)
    try:
        try:
            gold = _rows(db, gold_sql)
        except SqlToolError as exc:
            return Verdict(False, "rule:sql_rows", f"gold SQL failed: {exc}")
        try:
            got = _rows(db, sql)
        except SqlToolError as exc:
            return Verdict(False, "rule:sql_rows", f"the agent's last query failed: {exc}")
    finally:
        db.close()
    if got == gold:
        return Verdict(True, "rule:sql_rows", f"same {len(gold)} row(s) as the gold SQL")
    return Verdict(False, "rule:sql_rows", f"{len(got)} row(s) vs {len(gold)} gold row(s); {len(got & gold)} in common")
