"""Closed vocabularies that several stages and their quality suites share (no imports: DAG files read them)."""

BENCHMARK_KINDS = ("dabench", "tablebench", "bird")
EVAL_SUITES = (*BENCHMARK_KINDS, "heldout")  # the held-out split of the project's own dataset
# What became of one trial, as the agent's behaviour: a right or wrong answer, an answer never given (the turns
# ran out, three void turns in a row, a reply cut at max_tokens, a reply with no <answer> text), or a failure of
# the platform rather than the agent (the sandbox, the endpoint after its retries), or no agent for the item.
EVAL_OUTCOMES = (
    "correct",
    "wrong",
    "no_answer",
    "max_turns",
    "void_turn_limit",
    "reply_truncated",
    "sandbox_error",
    "endpoint_error",
    "not_run",
)
# Failures of the platform, not of the agent: a trajectory that ended with one is sampled again (up to the
# sampling parameters' max_attempts) and never published.
TRANSIENT_LLM_ERRORS = frozenset({"llm_retries_exhausted", "llm_rate_limited", "llm_endpoint_unavailable"})
SANDBOX_FAILURE = "sandbox_failure"
TRANSIENT_ERRORS = TRANSIENT_LLM_ERRORS | {SANDBOX_FAILURE}

# Text that stands for a missing value, compared stripped and lower-cased (profiling counts them, synthesis'
# programs too).
MISSING_TOKENS = ("", "none", "na", "n/a", "null", "nan", "-", "--", "?", "#n/a", "<na>")
