"""Bounded observations: the agent sees the head and the tail of long output, never all of it."""

from __future__ import annotations


def truncate_head_tail(text: str, head_chars: int, tail_chars: int) -> str:
    """Keep the first `head_chars` and last `tail_chars` characters, with a marker saying how much went."""
    if head_chars < 0 or tail_chars < 0:
        raise ValueError("head_chars and tail_chars must be >= 0")
    if len(text) <= head_chars + tail_chars:
        return text
    omitted = len(text) - head_chars - tail_chars
    tail = text[len(text) - tail_chars :] if tail_chars else ""
    return f"{text[:head_chars]}\n... [{omitted} characters truncated] ...\n{tail}"
