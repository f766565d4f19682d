"""Self-consistency judging of a query's N trajectories, trajectory selection, and reflection rescue.

``consistency`` is the offline (programmatic) judge, ``llm_judge`` the LLM judge; both implement
:class:`~datamind.judge.verdict.ConsistencyJudge`.  ``selection`` holds the paper's four selection settings,
``reflection`` the critique-and-revise loop, ``stage`` the shard task that writes ``judged`` rows.
"""
