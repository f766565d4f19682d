"""The LLM layer: one client for any OpenAI-compatible endpoint, shared by synthesis, sampling and judging.

from datamind.llm import LLMClient, LLMConfig, ResponseCache, run_all, extract_tag, ParseFailure

llm = LLMClient(LLMConfig.from_connection_dict(conn_fields), cache=ResponseCache(DataRoot(url)))
results = run_all([llm.chat_parsed("synthesizer", msgs, parse, template_version="synth-v1") for msgs in batch],
                  client=llm)
# each slot: ParsedResult, or ParseFailure / LLMCallError to record as a rejection (rejection_row);
# EndpointUnavailable, and any bug, is raised and fails the task.
"""

import importlib

# name -> submodule. Loaded on first use: ``datamind.llm.tags`` (text parsing, used at DAG parse time through the
# filters) must not pull in the HTTP client and ``openai``.
_EXPORTS = {
    "ResponseCache": "cache", "cache_key": "cache",
    "ChatResult": "client", "LLMClient": "client", "ParsedResult": "client",
    "ROLES": "config", "LLMConfig": "config", "Price": "config",
    "EndpointUnavailable": "errors", "LLMCallError": "errors", "LLMError": "errors", "ParseFailure": "errors",
    "rejection_row": "errors",
    "AdaptiveLimiter": "resilience", "CircuitBreaker": "resilience", "backoff_delay": "resilience",
    "PER_ITEM_ERRORS": "runner", "gather_all": "runner", "run_all": "runner",
    "TagParseError": "tags", "extract_all": "tags", "extract_choice": "tags", "extract_code": "tags",
    "extract_optional": "tags", "extract_tag": "tags", "extract_tags": "tags", "strip_code_fences": "tags",
    "UsageMeter": "usage",
}  # fmt: skip
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'datamind.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"datamind.llm.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
