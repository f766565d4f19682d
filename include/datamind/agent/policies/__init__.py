"""Expert policies that produce ReAct turns: ``offline_expert`` (no LLM) and ``llm_expert``."""
