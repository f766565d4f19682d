"""Closed vocabularies that several stages and their quality suites share (no imports: DAG files read them)."""

BENCHMARK_KINDS = ("dabench", "tablebench", "bird")
EVAL_SUITES = (*BENCHMARK_KINDS, "heldout")  # the held-out split of the project's own dataset
EVAL_OUTCOMES = ("correct", "wrong", "no_answer", "max_turns", "sandbox_error", "agent_error")
