"""Parsing of tagged LLM output (``<answer>...</answer>``, ``<code>...</code>``) that tolerates real model habits.

Models mention a tag in prose before using it, repeat it, nest it, forget the closing tag when a stop
sequence cut the reply, and wrap code in Markdown fences inside ``<code>``.  Pairing follows XML: each
closing tag closes the most recent unmatched opening tag of the same name, so ``I'll reply in <answer>
tags. <answer>42</answer>`` yields ``42`` and stray tags in prose never swallow the real block.

Every failure is a :class:`TagParseError` (a ``ValueError``) with a machine-readable ``code`` that
callers store as the rejection reason: ``no_text`` (None / not a string / blank), ``missing``,
``unclosed``, ``empty``, ``bad_choice``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Occurrence = Literal["first", "last"]

_TAG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_FENCE = re.compile(r"^\s*```[^\n`]*\n(?P<body>.*?)\n?\s*```\s*$", re.DOTALL)


class TagParseError(ValueError):
    """Malformed model output; ``code`` is stable and short, the message says what was expected."""

    def __init__(self, code: str, message: str, tag: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.tag = tag


@dataclass(frozen=True)
class TagSpan:
    start: int  # index of the first content character
    end: int  # index one past the last content character
    closed: bool


def _check_text(text: object) -> str:
    if text is None:
        raise TagParseError("no_text", "model output is None")
    if not isinstance(text, str):
        raise TagParseError("no_text", f"model output is {type(text).__name__}, not text")
    if not text.strip():
        raise TagParseError("no_text", "model output is empty")
    return text


@functools.lru_cache(maxsize=64)  # a handful of tag names, looked up for every block of every turn
def _pattern(tag: str) -> re.Pattern[str]:
    if not _TAG_NAME.match(tag):
        raise ValueError(f"invalid tag name {tag!r}")
    # Opening tags may carry attributes (<answer type="num">); names match case-insensitively.
    return re.compile(rf"<(?P<close>/)?\s*{re.escape(tag)}(?:\s[^<>]*)?\s*>", re.IGNORECASE)


def find_spans(text: str, tag: str) -> tuple[list[TagSpan], list[int]]:
    """Closed spans in document order, and content starts of openings left unclosed."""
    stack: list[int] = []
    spans: list[TagSpan] = []
    for m in _pattern(tag).finditer(text):
        if m.group("close"):
            if stack:  # a closing tag with no opening is prose noise: ignore it
                spans.append(TagSpan(stack.pop(), m.start(), True))
        else:
            stack.append(m.end())
    spans.sort(key=lambda s: s.start)
    return spans, stack


def extract_all(text: object, tag: str, *, strip: bool = True) -> list[str]:
    """Contents of every closed ``<tag>`` block, in document order (empty list when there is none)."""
    if text is None or not isinstance(text, str):
        raise TagParseError("no_text", "model output is None" if text is None else "model output is not text", tag)
    spans, _ = find_spans(text, tag)
    return [_clean(text[s.start : s.end], strip) for s in spans]


def extract_tag(
    text: object,
    tag: str,
    *,
    occurrence: Occurrence = "first",
    allow_unclosed: bool = False,
    allow_empty: bool = False,
    strip: bool = True,
) -> str:
    """Content of one ``<tag>`` block.

    ``allow_unclosed`` accepts an opening tag with no closing one (content runs to the end of the text),
    for replies cut by a stop sequence; it is used only when no closed block exists.
    """
    s = _check_text(text)
    spans, unclosed = find_spans(s, tag)
    if spans:
        span = spans[0] if occurrence == "first" else spans[-1]
        content = _clean(s[span.start : span.end], strip)
    elif unclosed:
        if not allow_unclosed:
            raise TagParseError("unclosed", f"<{tag}> is opened but never closed with </{tag}>", tag)
        start = unclosed[0] if occurrence == "first" else unclosed[-1]
        content = _clean(s[start:], strip)
    else:
        raise TagParseError("missing", f"no <{tag}>...</{tag}> block in the output", tag)
    if not allow_empty and not content.strip():
        raise TagParseError("empty", f"<{tag}> block is empty", tag)
    return content


def extract_optional(text: object, tag: str, **kwargs) -> str | None:
    """Like :func:`extract_tag` but a missing tag gives None (unclosed/empty/no-text still raise)."""
    try:
        return extract_tag(text, tag, **kwargs)
    except TagParseError as exc:
        if exc.code == "missing":
            return None
        raise


def extract_tags(
    text: object, required: Sequence[str], optional: Iterable[str] = (), **kwargs
) -> dict[str, str | None]:
    """Several tags at once: ``{tag: content}``; a missing optional tag maps to None."""
    out: dict[str, str | None] = {tag: extract_tag(text, tag, **kwargs) for tag in required}
    for tag in optional:
        out[tag] = extract_optional(text, tag, **kwargs)
    return out


def strip_code_fences(code: str) -> str:
    """``code`` without one surrounding Markdown fence (```python ... ```); unfenced code is returned as is."""
    m = _FENCE.match(code)
    return m.group("body") if m else code


def extract_code(
    text: object, tag: str = "code", *, occurrence: Occurrence = "first", allow_unclosed: bool = False
) -> str:
    """Code inside ``<code>``: fences removed, surrounding blank lines dropped, indentation kept."""
    raw = extract_tag(text, tag, occurrence=occurrence, allow_unclosed=allow_unclosed, strip=False)
    body = strip_code_fences(raw.strip("\n"))
    body = "\n".join(line.rstrip() for line in body.strip("\n").splitlines())
    if not body.strip():
        raise TagParseError("empty", f"<{tag}> block holds no code", tag)
    return body


def extract_choice(text: object, tag: str, choices: Sequence[str], *, occurrence: Occurrence = "last") -> str:
    """A verdict such as ``<verdict>correct</verdict>`` normalised to one of ``choices`` (case-insensitive).

    The last occurrence is the default because judges tend to reason first and conclude at the end.
    """
    value = extract_tag(text, tag, occurrence=occurrence).strip().strip(".").strip().lower()
    for choice in choices:
        if value == choice.lower():
            return choice
    raise TagParseError("bad_choice", f"<{tag}> holds {value[:80]!r}; expected one of {list(choices)}", tag)


def _clean(content: str, strip: bool) -> str:
    return content.strip() if strip else content
