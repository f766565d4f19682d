"""The agent every stage runs: a ReAct agent (``<think>``, ``<code>``, ``<interpreter>``, ``<answer>``).

``protocol`` formats and parses turns, ``loop`` drives any policy through a sandbox session (the one agent
loop: sampling, judging's reflection rounds, evaluation and RL training all run it), ``policies`` holds the
offline expert (replays reference solution variants) and the LLM expert, ``runner`` runs a query's
trajectories in a shard's sandbox pool, ``tasks`` and ``templates`` build what the agent is asked,
``answer`` grades an answer against a reference and ``params`` are the sampling settings.

It sits on its own floor below every stage (``tests/test_layers.py``) and reads no stage's module.
"""
