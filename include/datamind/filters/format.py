"""Format compliance: the trajectory is a clean ReAct conversation that converts losslessly to training data.

Checked, in order: roles (system?, user, then assistant/tool strictly alternating, ending with the
assistant); every assistant turn is ``<think>`` + exactly one ``<code>`` or ``<answer>`` (the strict reading
training scores, ``protocol.strict_turn``, must agree); only the last turn answers and its answer equals
the stored ``final_answer``; every tool turn is an ``<interpreter>`` block; void turns (by default)
are not allowed; and the round trip parse -> re-render reproduces every agent turn byte for byte, so
nothing is lost or invented when the conversation is converted to the training schema.
"""

from __future__ import annotations

import re

from datamind.agent import protocol


def check(messages: list[dict], final_answer: str | None, *, allow_void_turns: bool = False) -> tuple[str, str] | None:
    if not messages:
        return "empty_messages", "trajectory has no messages"
    try:
        protocol.split_conversation([dict(m) for m in messages])
    except ValueError as exc:
        code = str(exc).split(":", 1)[0]
        return "bad_structure", f"not convertible to the training schema ({code}): {exc}"
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    for i, m in enumerate(messages):
        if m["role"] == "tool" and protocol.interpreter_body(m["content"]) is None:
            return "bad_tool_turn", f"message {i} (tool) is not wrapped in <interpreter>...</interpreter>"
    for k, text in enumerate(assistant):
        turn = protocol.parse_turn(text)
        last = k == len(assistant) - 1
        if turn.is_void:
            if last or not allow_void_turns:
                return "void_turn", f"assistant turn {k + 1} is a void turn ({turn.void_reason})"
            continue
        if not turn.think:
            return "missing_think", f"assistant turn {k + 1} has no <think> block"
        if last and not turn.is_answer:
            return "no_final_answer", "the last assistant turn does not answer"
        if not last and turn.is_answer:
            return "early_answer", f"assistant turn {k + 1} answers before the last turn"
        rendered = (
            protocol.format_answer_turn(turn.think, turn.answer)
            if turn.is_answer
            else protocol.format_code_turn(turn.think, turn.code)
        )
        if protocol.strict_turn(text).well_formed is False or _canon(rendered) != _canon(text):
            return (
                "not_lossless",
                f"assistant turn {k + 1} has text outside <think>/<code>/<answer> or a malformed block",
            )
    if not protocol.format_ok([dict(m) for m in messages]) and not allow_void_turns:
        return "not_react", "the training-side format check rejects this conversation"
    answer = protocol.parse_turn(assistant[-1]).answer
    if (answer or "").strip() != (final_answer or "").strip():
        return "answer_mismatch", "stored final_answer differs from the last <answer> block"
    return None


_FENCE = re.compile(r"```[A-Za-z0-9_+-]*")
_TAG_SPACE = re.compile(r"\s*(</?\s*(?:think|code|answer)\s*>)\s*", re.IGNORECASE)


def _canon(text: str) -> str:
    """Whitespace-insensitive form; a ```python fence and a bare code block are the same code."""
    return " ".join(_TAG_SPACE.sub(r"\1", _FENCE.sub("", text)).split())
