"""The expert policy backed by an OpenAI-compatible model (the paper samples with DeepSeek-V3.1).

Each of a query's N samples passes its own ``sample_index`` so the response cache keeps the samples apart
(a rerun replays all N instead of collapsing them).  The chat API has no ``tool`` role without function
calling, so interpreter turns are sent as ``user`` messages; their ``<interpreter>`` wrapper tells the
model they are environment output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datamind.agent import protocol
from datamind.agent.loop import PolicyGaveUp, PolicyReply
from datamind.llm.errors import EndpointUnavailable, LLMCallError
from datamind.llm.grammars import grammar
from datamind.llm.usage import cached_part

# Appended to the last output the agent reads before its last allowed turn. The trajectory records the output
# as the sandbox printed it: a model trained on it learns to answer once it has the value, not to wait for a note.
LAST_TURN_NOTE = "\n\n(This is your last turn: give your final answer now, from what the outputs above show.)"


def to_chat(messages: list[dict]) -> list[dict]:
    return [{"role": "user" if m["role"] == "tool" else m["role"], "content": m["content"]} for m in messages]


class LLMExpertPolicy:
    def __init__(
        self,
        client: Any,
        *,
        params: Mapping[str, Any],
        sample_index: int,
        template_version: str,
        role: str = "expert",
        last_turn: int | None = None,
    ) -> None:
        self.client = client
        self.role = role
        self.params = {**dict(params), "stop": list(protocol.STOP_SEQUENCES)}
        self.sample_index = sample_index
        self.template_version = template_version
        # sent only where the endpoint takes grammars (LLMConfig.grammar)
        self.grammar = grammar("react_turn", final=False)
        # ``last_turn``: the turn (1-based) on which the agent must answer, by grammar and by a note in what it
        # reads; None leaves the budget to run out (evaluation measures whether a model answers on its own)
        self.last_turn = last_turn
        self.final_grammar = grammar("react_turn", final=True)
        shown = ",".join(f"{k}={v}" for k, v in sorted(dict(params).items()))
        self.name = f"llm:{role}:{shown}:sample={sample_index}"

    async def next_turn(self, messages: list[dict], last_observation: Any | None) -> PolicyReply:
        chat, final = to_chat(messages), False
        if self.last_turn is not None and sum(m["role"] == "assistant" for m in messages) + 1 >= self.last_turn:
            final = True
            if chat and chat[-1]["role"] == "user":  # only the model reads this; the trajectory keeps the output
                chat[-1] = {**chat[-1], "content": chat[-1]["content"] + LAST_TURN_NOTE}
        try:
            res = await self.client.chat(
                self.role,
                chat,
                params=self.params,
                sample_index=self.sample_index,
                template_version=self.template_version,
                grammar=self.final_grammar if final else self.grammar,
            )
        except EndpointUnavailable:
            raise  # the whole task must fail: no other trajectory can succeed either
        except LLMCallError as exc:
            raise PolicyGaveUp(exc.reason_code, str(exc)) from exc
        if getattr(res, "finish_reason", None) == "length":
            # Whatever the cut text holds (an <answer> that stops mid-number, code that stops mid-line),
            # it is not what the model meant: the trajectory ends here with the cause recorded.
            raise PolicyGaveUp(
                "reply_truncated",
                f"the {self.role} reply was cut at max_tokens ({self.params.get('max_tokens')}): {res.text[-80:]!r}",
            )
        cached = cached_part(res)
        return PolicyReply(
            text=_restore_stop(res.text, getattr(res, "finish_reason", None)),
            model=res.model,
            prompt_tokens=res.prompt_tokens,
            completion_tokens=res.completion_tokens,
            cached_prompt_tokens=cached[0],
            cached_completion_tokens=cached[1],
        )


def _restore_stop(text: str, finish_reason: str | None) -> str:
    """Servers strip the matched stop sequence; put the closing tag back so the turn parses."""
    t = text or ""
    if finish_reason == "stop":
        low = t.lower()
        if low.rfind("<code>") > low.rfind("</code>"):
            return t.rstrip() + "\n</code>"
        if low.rfind("<answer>") > low.rfind("</answer>"):
            return t.rstrip() + "\n</answer>"
    return t
