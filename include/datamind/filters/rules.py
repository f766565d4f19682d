"""The rule filters and the function that applies them in order (format -> length -> linguistic -> coherence ->
literal -> shown): the paper's three, then a thought that claims a fix its cell did not make
(``filters.coherence``), a code cell that writes the final answer as a literal instead of computing it
(``datamind.references``), and an answer holding a number nothing the agent saw holds (``agent.shown``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from datamind import references
from datamind.agent import shown
from datamind.agent.protocol import strict_turn
from datamind.filters import coherence, linguistic
from datamind.filters import format as format_rule
from datamind.filters.tokenizer import count_tokens, count_tokens_batch

MAX_ANSWER_TOKENS = 1024  # paper: drop trajectories whose final answer exceeds 1,024 tokens


@dataclass(frozen=True)
class Finding:
    rule: str  # format | length | linguistic | coherence | literal | shown
    code: str  # stable reason code stored in rejections
    reason: str


@dataclass(frozen=True)
class FilterConfig:
    max_answer_tokens: int = MAX_ANSWER_TOKENS
    allow_void_turns: bool = False  # training masks trajectories with void turns; keep them out by default
    max_minority_script_share: float = linguistic.MAX_MINORITY_SHARE


def check_format(row: dict, config: FilterConfig = FilterConfig()) -> Finding | None:
    problem = format_rule.check(
        row.get("messages") or [], row.get("final_answer"), allow_void_turns=config.allow_void_turns
    )
    return Finding("format", *problem) if problem else None


def check_length(row: dict, config: FilterConfig = FilterConfig(), n_tokens: int | None = None) -> Finding | None:
    n = count_tokens(row.get("final_answer") or "") if n_tokens is None else n_tokens
    if n > config.max_answer_tokens:
        return Finding("length", "answer_too_long", f"final answer has {n} tokens (limit {config.max_answer_tokens})")
    return None


def check_linguistic(row: dict, config: FilterConfig = FilterConfig()) -> Finding | None:
    problem = linguistic.check_trajectory(
        row.get("messages") or [], max_minority_share=config.max_minority_script_share
    )
    return Finding("linguistic", *problem) if problem else None


def check_coherence(row: dict, config: FilterConfig = FilterConfig()) -> Finding | None:
    messages = row.get("messages") or []
    thinks = [_think(m.get("content") or "") for m in messages if m.get("role") == "assistant"]
    outputs = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
    if coherence.unchanged_fix(thinks, outputs):
        return Finding("coherence", "fix_without_change", "a thought announces a fix its cell's output does not show")
    return None


def check_literal_answer(row: dict, config: FilterConfig = FilterConfig()) -> Finding | None:
    answer = row.get("final_answer") or ""
    codes = [
        strict_turn(m.get("content") or "").code or "" for m in row.get("messages") or [] if m["role"] == "assistant"
    ]
    literal = references.planted_in_cells(codes, answer)
    if literal is not None:
        return Finding(
            "literal",
            references.LITERAL_ANSWER,
            f"a code cell writes the final answer as the literal {literal} instead of computing it",
        )
    return None


def check_shown_answer(row: dict, config: FilterConfig = FilterConfig()) -> Finding | None:
    number = shown.unshown_number(row.get("final_answer") or "", row.get("messages") or [])
    if number is not None:
        return Finding(
            "shown",
            "unshown_answer",
            f"the final answer's {number:g} appears in no output and no prompt the agent saw",
        )
    return None


def _think(turn: str) -> str:
    start, end = turn.find("<think>"), turn.find("</think>")
    return turn[start + 7 : end] if 0 <= start < end else ""


RULES: tuple[Callable[[dict, FilterConfig], Finding | None], ...] = (
    check_format,
    check_length,
    check_linguistic,
    check_coherence,
    check_literal_answer,
    check_shown_answer,
)


def first_failure(row: dict, config: FilterConfig = FilterConfig(), n_tokens: int | None = None) -> Finding | None:
    """The first rule ``row`` fails, in order; ``n_tokens``: its answer's tokens where already counted."""
    for rule in RULES:
        finding = check_length(row, config, n_tokens) if rule is check_length else rule(row, config)
        if finding is not None:
            return finding
    return None


def apply_filters(
    rows: Iterable[dict], config: FilterConfig = FilterConfig()
) -> tuple[list[dict], list[tuple[dict, Finding]]]:
    """Split rows into kept and dropped (with the first failing rule); answers are tokenized in one batch."""
    rows = list(rows)
    counts = count_tokens_batch([r.get("final_answer") or "" for r in rows])
    kept: list[dict] = []
    dropped: list[tuple[dict, Finding]] = []
    for row, n in zip(rows, counts, strict=True):
        finding = first_failure(row, config, n)
        if finding is None:
            kept.append(row)
        else:
            dropped.append((row, finding))
    return kept, dropped
