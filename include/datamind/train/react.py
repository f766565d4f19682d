"""The agent's turn format: ``<think>``, then ``<code>`` or ``<answer>``; ``<interpreter>`` is the environment.

Shared by the rollout loop (what to execute, when to stop, what is a void turn) and the reward
(is the format intact, what is the final answer).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# Generation stops after a closing </code> / </answer>, or as soon as the model starts writing the
# interpreter's output itself (the same stop set as datamind.rollout.protocol).
STOP_STRINGS = ("</code>", "</answer>", "<interpreter>")
_CLOSERS = ("</code>", "</answer>")

_TURN = re.compile(
    r"^\s*<think>(?P<think>.*?)</think>\s*(?:<code>(?P<code>.*?)</code>|<answer>(?P<answer>.*?)</answer>)\s*$",
    re.DOTALL,
)
_CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class Turn:
    code: str | None  # the code inside <code>, fences removed
    answer: str | None
    well_formed: bool  # exactly <think>..</think> then one <code> or <answer> block, nothing else

    @property
    def has_valid_code(self) -> bool:
        return self.code is not None and is_valid_code(self.code)

    @property
    def is_void(self) -> bool:
        """A void turn produced neither runnable code nor an answer (the paper's void-turn rule)."""
        return not self.has_valid_code and not (self.answer and self.answer.strip())


def strip_fences(code: str) -> str:
    m = _FENCE.match(code)
    return m.group(1) if m else code.strip("\n")


def is_valid_code(code: str) -> bool:
    if not code.strip():
        return False
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def cut_at_stop(text: str) -> str:
    """Up to and including the first ``</code>``/``</answer>``, and never a self-written ``<interpreter>``."""
    ends = [text.find(s) + len(s) for s in _CLOSERS if s in text]
    if "<interpreter>" in text:
        ends.append(text.find("<interpreter>"))
    return text[: min(ends)] if ends else text


def parse_turn(text: str) -> Turn:
    m = _TURN.match(text)
    if m:
        code = m.group("code")
        return Turn(strip_fences(code) if code is not None else None, m.group("answer"), True)
    # Malformed turns still get their code executed / answer read, so one stray word does not end a
    # trajectory; the format reward is what punishes them.
    code_m, ans_m = _CODE.search(text), _ANSWER.search(text)
    code = strip_fences(code_m.group(1)) if code_m else None
    if code_m and ans_m:  # both: whichever closes first is what the agent committed to
        if code_m.end() <= ans_m.end():
            ans_m = None
        else:
            code = None
    return Turn(code, ans_m.group(1) if ans_m else None, False)


def final_answer(messages: list[dict]) -> str | None:
    for msg in reversed(messages):
        if msg["role"] == "assistant":
            return parse_turn(msg["content"]).answer
    return None


def format_ok(messages: list[dict]) -> bool:
    """Every assistant turn well formed, code in all but the last, an answer in the last; tool turns wrapped."""
    assistant = [m for m in messages if m["role"] == "assistant"]
    if not assistant:
        return False
    for i, msg in enumerate(assistant):
        turn = parse_turn(msg["content"])
        if not turn.well_formed:
            return False
        last = i == len(assistant) - 1
        if last and turn.answer is None:
            return False
        if not last and turn.code is None:
            return False
    for msg in messages:
        if msg["role"] == "tool":
            c = msg["content"].strip()
            if not (c.startswith("<interpreter>") and c.endswith("</interpreter>")):
                return False
    return True
