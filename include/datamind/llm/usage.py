"""Token and cost accounting: per item on every result, summed per task by :class:`UsageMeter` for the logs."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, field

log = logging.getLogger("datamind.llm")


@dataclass
class ModelUsage:
    calls: int = 0  # requests answered by the endpoint (paid)
    cached_calls: int = 0  # answered from the response cache (free)
    prompt_tokens: int = 0  # paid
    completion_tokens: int = 0  # paid
    cached_prompt_tokens: int = 0  # would have been paid without the cache
    cached_completion_tokens: int = 0
    # of the paid prompt tokens, those the endpoint's prefix cache held (not evaluated again; billed at the
    # cached rate where the provider discounts them); the rest is what the server really had to read
    endpoint_cached_prompt_tokens: int = 0
    request_s: float = 0.0  # summed latency of the paid calls
    cost_usd: float | None = None  # None while no price is configured for the model
    saved_usd: float | None = None


def cached_part(result) -> tuple[int, int]:
    """(prompt, completion) tokens of a chat result (or every attempt of a parsed one) that the response
    cache answered: counted in the result's tokens, but not paid for again."""
    parts = getattr(result, "results", None) or (result,)
    hits = [r for r in parts if getattr(r, "cached", False)]
    return sum(int(r.prompt_tokens) for r in hits), sum(int(r.completion_tokens) for r in hits)


@dataclass
class UsageMeter:
    by_model: dict[str, ModelUsage] = field(default_factory=dict)
    events: Counter = field(default_factory=Counter)  # retries by cause, throttles, failures, parse retries

    def record_call(
        self,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        cached: bool,
        cost_usd: float | None,
        endpoint_cached: int = 0,
        latency_s: float = 0.0,
    ) -> None:
        u = self.by_model.setdefault(model, ModelUsage())
        if cached:
            u.cached_calls += 1
            u.cached_prompt_tokens += prompt_tokens
            u.cached_completion_tokens += completion_tokens
            if cost_usd is not None:
                u.saved_usd = (u.saved_usd or 0.0) + cost_usd
        else:
            u.calls += 1
            u.prompt_tokens += prompt_tokens
            u.completion_tokens += completion_tokens
            u.endpoint_cached_prompt_tokens += endpoint_cached
            u.request_s += latency_s
            if cost_usd is not None:
                u.cost_usd = (u.cost_usd or 0.0) + cost_usd

    def count(self, event: str, n: int = 1) -> None:
        self.events[event] += n

    # -- totals ------------------------------------------------------------------------------
    @property
    def calls(self) -> int:
        return sum(u.calls for u in self.by_model.values())

    @property
    def cached_calls(self) -> int:
        return sum(u.cached_calls for u in self.by_model.values())

    @property
    def prompt_tokens(self) -> int:
        return sum(u.prompt_tokens for u in self.by_model.values())

    @property
    def completion_tokens(self) -> int:
        return sum(u.completion_tokens for u in self.by_model.values())

    @property
    def endpoint_cached_prompt_tokens(self) -> int:
        return sum(u.endpoint_cached_prompt_tokens for u in self.by_model.values())

    @property
    def cost_usd(self) -> float | None:
        costs = [u.cost_usd for u in self.by_model.values() if u.cost_usd is not None]
        return sum(costs) if costs else None

    def snapshot(self) -> dict:
        """Plain-JSON totals (what a task can push to XCom or write to a run report)."""
        return {
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "endpoint_cached_prompt_tokens": self.endpoint_cached_prompt_tokens,
            "cost_usd": self.cost_usd,
            "events": dict(self.events),
            "by_model": {m: asdict(u) for m, u in sorted(self.by_model.items())},
        }

    def summary(self, label: str = "LLM usage") -> str:
        cost = "n/a (no price configured)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        parts = [
            f"{label}: {self.calls} calls, {self.cached_calls} cache hits",
            f"tokens prompt={self.prompt_tokens} (endpoint-cached {self.endpoint_cached_prompt_tokens}) "
            f"completion={self.completion_tokens}",
            f"cost {cost}",
        ]
        if self.events:
            parts.append("events " + " ".join(f"{k}={v}" for k, v in sorted(self.events.items())))
        return "; ".join(parts)

    def log_summary(self, label: str = "LLM usage", logger: logging.Logger | None = None) -> None:
        (logger or log).info("%s", self.summary(label))
