"""The LLM layer: one client for any OpenAI-compatible endpoint, shared by synthesis, sampling and judging.

from datamind.llm import LLMClient, LLMConfig, ResponseCache, run_all, extract_tag, ParseFailure

llm = LLMClient(LLMConfig.from_connection_dict(conn_fields), cache=ResponseCache(DataRoot(url)))
results = run_all([llm.chat_parsed("synthesizer", msgs, parse, template_version="synth-v1") for msgs in batch],
                  client=llm)
# each slot: ParsedResult, or ParseFailure / LLMCallError to record as a rejection (rejection_row);
# EndpointUnavailable, and any bug, is raised and fails the task.
"""

from datamind.llm.cache import ResponseCache, cache_key
from datamind.llm.client import ChatResult, LLMClient, ParsedResult
from datamind.llm.config import ROLES, LLMConfig, Price
from datamind.llm.errors import EndpointUnavailable, LLMCallError, LLMError, ParseFailure, rejection_row
from datamind.llm.resilience import AdaptiveLimiter, CircuitBreaker, backoff_delay
from datamind.llm.runner import PER_ITEM_ERRORS, gather_all, run_all
from datamind.llm.tags import (
    TagParseError,
    extract_all,
    extract_choice,
    extract_code,
    extract_optional,
    extract_tag,
    extract_tags,
    strip_code_fences,
)
from datamind.llm.usage import UsageMeter

__all__ = [
    "PER_ITEM_ERRORS", "ROLES", "AdaptiveLimiter", "ChatResult", "CircuitBreaker", "EndpointUnavailable",
    "LLMCallError", "LLMClient",
    "LLMConfig", "LLMError", "ParseFailure", "ParsedResult", "Price", "ResponseCache", "TagParseError", "UsageMeter",
    "backoff_delay", "cache_key", "extract_all", "extract_choice", "extract_code", "extract_optional", "extract_tag",
    "extract_tags", "gather_all", "rejection_row", "run_all", "strip_code_fences",
]  # fmt: skip
