"""The ReAct turn protocol the agent speaks: the one module that renders and parses it, for sampling, judging,
filters, exports and training.

An assistant turn is ``<think>...</think>`` followed by exactly one ``<code>...</code>`` or ``<answer>...</answer>``;
the environment replies in a ``tool`` message wrapped in ``<interpreter>...</interpreter>``.  A turn that yields
neither runnable code nor an answer is a *void turn*: it is kept in the trajectory (with the environment's note
about it) and counted, because training masks trajectories that contain one.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from datamind.llm.tags import TagParseError, extract_code, extract_optional, find_spans

# The model must stop after closing a code block: it may not write the interpreter's output itself.
STOP_SEQUENCES = ("</code>", "</answer>", "<interpreter>")

VOID_NO_ACTION = "no_action"  # neither <code> nor <answer>
VOID_BOTH = "code_and_answer"  # both in one turn: ambiguous which one the agent committed to
VOID_BAD_CODE = "invalid_code"  # <code> holds nothing executable (empty or not Python)
VOID_EMPTY_ANSWER = "empty_answer"
VOID_UNCLOSED = "unclosed_tag"

_VOID_NOTES = {
    VOID_NO_ACTION: "No <code> or <answer> block was found in your last turn. Reply with <think> followed by "
    "either <code> or <answer>.",
    VOID_BOTH: "Your last turn had both <code> and <answer>. Use one per turn: run code first, answer after "
    "reading its output.",
    VOID_BAD_CODE: "The <code> block in your last turn is not valid Python and was not executed.",
    VOID_EMPTY_ANSWER: "Your <answer> block was empty.",
    VOID_UNCLOSED: "A tag in your last turn was opened but never closed.",
}


@dataclass(frozen=True)
class ParsedTurn:
    think: str | None
    code: str | None
    answer: str | None
    void_reason: str | None  # None for a valid turn
    detail: str = ""

    @property
    def is_void(self) -> bool:
        return self.void_reason is not None

    @property
    def is_answer(self) -> bool:
        return self.void_reason is None and self.answer is not None


@functools.lru_cache(maxsize=4096)
def _python_ok(code: str) -> str | None:
    """None for code that parses, else the parser's complaint. Remembered: a turn is parsed again by each
    filter and by the audit, and a query's trajectories often share their code."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def clip_reply(text: str) -> str:
    """Drop anything a model wrote after its first closing ``</code>``/``</answer>`` (a hallucinated interpreter)."""
    ends = [m.end() for m in re.finditer(r"</\s*(code|answer)\s*>", text, re.IGNORECASE)]
    clipped = text[: ends[0]] if ends else text
    # A stop sequence may have eaten the closing tag: restore it so the turn parses.
    if not ends:
        spans_c, open_c = find_spans(text, "code")
        spans_a, open_a = find_spans(text, "answer")
        if open_c and not spans_c and not open_a:
            clipped = text.rstrip() + "\n</code>"
        elif open_a and not spans_a and not open_c:
            clipped = text.rstrip() + "\n</answer>"
    return clipped.strip()


def parse_turn(text: str) -> ParsedTurn:
    """Classify one assistant reply (already clipped) into code, answer or a void turn with a reason."""
    if not isinstance(text, str) or not text.strip():
        return ParsedTurn(None, None, None, VOID_NO_ACTION, "empty reply")
    try:
        think = extract_optional(text, "think")
        code_spans, code_open = find_spans(text, "code")
        ans_spans, ans_open = find_spans(text, "answer")
    except TagParseError as exc:
        return ParsedTurn(None, None, None, VOID_UNCLOSED, str(exc))
    if (code_open and not code_spans) or (ans_open and not ans_spans):
        return ParsedTurn(think, None, None, VOID_UNCLOSED, "unclosed <code> or <answer>")
    if code_spans and ans_spans:
        return ParsedTurn(think, None, None, VOID_BOTH)
    if code_spans:
        try:
            code = extract_code(text)
        except TagParseError as exc:
            return ParsedTurn(think, None, None, VOID_BAD_CODE, str(exc))
        problem = _python_ok(code)
        if problem:
            return ParsedTurn(think, code, None, VOID_BAD_CODE, problem)
        return ParsedTurn(think, code, None, None)
    if ans_spans:
        answer = text[ans_spans[0].start : ans_spans[0].end].strip()
        if not answer:
            return ParsedTurn(think, None, None, VOID_EMPTY_ANSWER)
        return ParsedTurn(think, None, answer, None)
    return ParsedTurn(think, None, None, VOID_NO_ACTION)


def void_note(reason: str, detail: str = "") -> str:
    note = _VOID_NOTES.get(reason, f"Invalid turn ({reason}).")
    return f"{note} ({detail})" if detail else note


# -- rendering -----------------------------------------------------------------------------------
def format_code_turn(think: str, code: str) -> str:
    return f"<think>\n{think.strip()}\n</think>\n<code>\n```python\n{code.strip()}\n```\n</code>"


def format_answer_turn(think: str, answer: str) -> str:
    return f"<think>\n{think.strip()}\n</think>\n<answer>\n{answer.strip()}\n</answer>"


def format_interpreter(output: str) -> str:
    # The closing tag inside program output would end the block early for any reader.
    body = (output or "").replace("</interpreter>", "</ interpreter>")
    return f"<interpreter>\n{body.rstrip()}\n</interpreter>"


def interpreter_body(content: str) -> str | None:
    """The output inside a tool message's ``<interpreter>`` wrapper, or None when it is not wrapped."""
    m = re.fullmatch(r"\s*<interpreter>\n?(.*?)\n?</interpreter>\s*", content, re.DOTALL)
    return m.group(1) if m else None


_FAILURE_LABELS = {
    "blocked": "Execution refused by the sandbox",
    "exception": "Error",
    "timeout": "Execution timed out",
    "memory": "Execution ran out of memory",
    "output_limit": "Execution printed too much output and was stopped",
    "killed": "Execution was killed",
    None: "Execution failed",
}


def observation_text(ok: bool, output: str, error_kind: str | None) -> str:
    """What the agent reads back from one execution (errors are labelled so the agent can react)."""
    out = (output or "").rstrip()
    if ok:
        return out if out else "[no output: use print() to show values]"
    label = _FAILURE_LABELS.get(error_kind, _FAILURE_LABELS[None])
    return f"{label}:\n{out}" if out else label


def observation_failed(content: str) -> bool:
    """Whether a tool message reports a failed execution (as ``observation_text`` labels one)."""
    body = interpreter_body(content)
    first = (body if body is not None else content).split("\n", 1)[0].rstrip(":")
    return first in _FAILURE_LABELS.values()


# -- digests for reflection ------------------------------------------------------------------------
def attempt_digest(messages: list[dict], max_chars: int = 1800, output_chars: int = 300) -> str:
    """A previous attempt as a reviewer would skim it: each step's code and (clipped) output, then the
    final answer. What a reflection round shows the agent besides the answers (paper eq. 3)."""
    parts: list[str] = []
    step = 0
    for m in messages:
        if m["role"] == "assistant":
            turn = parse_turn(clip_reply(m["content"]))
            if turn.code:
                step += 1
                parts.append(f"Step {step} code:\n{turn.code.strip()}")
            elif turn.answer:
                parts.append(f"Final answer: {turn.answer.strip()}")
        elif m["role"] != "system" and parts:
            body = interpreter_body(m["content"])
            if body is not None:
                out = body.strip()
                if len(out) > output_chars:
                    out = out[: output_chars - 5].rstrip() + " ..."
                parts.append(f"Output:\n{out or '(nothing printed)'}")
    text = "\n".join(parts) or "(no steps)"
    if len(text) > max_chars:  # keep the end: the last steps and the answer are what the review is about
        text = "... (earlier steps omitted)\n" + text[-(max_chars - 30) :]
    return text


# -- the training side's reading ---------------------------------------------------------------------
# Training generates with the same stops and scores the same shape strictly: a turn is well formed only
# when it is exactly <think>..</think> then one <code> or <answer> block (the format reward), while a
# malformed turn still gets its code run or its answer read, so one stray word does not end a rollout.
STOP_STRINGS = STOP_SEQUENCES
_CLOSERS = ("</code>", "</answer>")

_STRICT_TURN = re.compile(
    r"^\s*<think>(?P<think>.*?)</think>\s*(?:<code>(?P<code>.*?)</code>|<answer>(?P<answer>.*?)</answer>)\s*$",
    re.DOTALL,
)
_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_CODE_BLOCK = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_STRICT_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class StrictTurn:
    code: str | None  # the code inside <code>, fences removed
    answer: str | None
    well_formed: bool  # exactly <think>..</think> then one <code> or <answer> block, nothing else
    think: str | None = None  # the first <think> block's text

    @property
    def has_valid_code(self) -> bool:
        return self.code is not None and is_valid_code(self.code)

    @property
    def is_void(self) -> bool:
        """A void turn produced neither runnable code nor an answer (the paper's void-turn rule)."""
        return not self.has_valid_code and not (self.answer and self.answer.strip())


def strip_code_fences(code: str) -> str:
    m = _STRICT_FENCE.match(code)
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


def strict_turn(text: str) -> StrictTurn:
    m = _STRICT_TURN.match(text)
    if m:
        code = m.group("code")
        code = strip_code_fences(code) if code is not None else None
        return StrictTurn(code, m.group("answer"), True, m.group("think"))
    # Malformed turns still get their code executed / answer read, so one stray word does not end a
    # trajectory; the format reward is what punishes them.
    code_m, ans_m = _CODE_BLOCK.search(text), _ANSWER_BLOCK.search(text)
    code = strip_code_fences(code_m.group(1)) if code_m else None
    if code_m and ans_m:  # both: whichever closes first is what the agent committed to
        if code_m.end() <= ans_m.end():
            ans_m = None
        else:
            code = None
    think_m = _THINK_BLOCK.search(text)
    return StrictTurn(code, ans_m.group(1) if ans_m else None, False, think_m.group(1) if think_m else None)


def final_answer(messages: list[dict]) -> str | None:
    for msg in reversed(messages):
        if msg["role"] == "assistant":
            return strict_turn(msg["content"]).answer
    return None


def format_ok(messages: list[dict]) -> bool:
    """Every assistant turn well formed, code in all but the last, an answer in the last; tool turns wrapped."""
    assistant = [m for m in messages if m["role"] == "assistant"]
    if not assistant:
        return False
    for i, msg in enumerate(assistant):
        turn = strict_turn(msg["content"])
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


_ROLES = {"system", "user", "assistant", "tool"}


def split_conversation(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """Prompt (system/user turns before the first assistant turn) and the continuation after it.

    Raises ValueError with a reason code prefix when the conversation cannot be trained on.
    """
    if not messages:
        raise ValueError("empty_messages: conversation has no messages")
    roles = [m.get("role") for m in messages]
    bad = sorted({r for r in roles if r not in _ROLES}, key=str)
    if bad:
        raise ValueError(f"unknown_role: roles {bad} are not system/user/assistant/tool")
    for i, m in enumerate(messages):
        if not (m.get("content") or "").strip():
            raise ValueError(f"empty_turn: message {i} ({m['role']}) has no content")
    if "assistant" not in roles:
        raise ValueError("no_assistant_turn: nothing for the agent to learn")
    if roles[-1] != "assistant":
        raise ValueError(f"ends_with_{roles[-1]}: the last turn must be the agent's answer")
    first = roles.index("assistant")
    head = roles[1:first] if roles[0] == "system" else roles[:first]
    if head != ["user"]:
        raise ValueError(f"bad_prompt: expected [system], user before the first assistant turn, got {roles[:first]}")
    # After the prompt the turns must alternate agent / environment (LLaMA-Factory requires it, and
    # two agent turns in a row would mean a lost interpreter output).
    for j, role in enumerate(roles[first:]):
        want = "assistant" if j % 2 == 0 else "tool"
        if role != want:
            raise ValueError(f"bad_alternation: turn {first + j} is {role!r}, expected {want!r}")
    clean = [{"role": m["role"], "content": m["content"]} for m in messages]
    return clean[:first], clean[first:]
