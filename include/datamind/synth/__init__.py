"""Query synthesis: turn accepted catalog tables into data-analysis questions (DATAMIND section 3.1).

Entry points: :func:`datamind.synth.stage.plan_synthesis` and :func:`datamind.synth.stage.synthesize_shard`.
The offline engine (programmatic templates with executed reference solutions) is the default backend;
the LLM backend is chosen with ``SynthParams(backend="llm")``.
"""
