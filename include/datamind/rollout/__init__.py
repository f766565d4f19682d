"""Trajectory sampling: a ReAct agent (``<think>``, ``<code>``, ``<interpreter>``, ``<answer>``) run N times a query.

``protocol`` formats and parses turns, ``agent`` drives any policy through a sandbox session,
``policies`` holds the offline expert (replays reference solution variants) and the LLM expert,
``stage`` plans shards over the ``queries`` table and writes ``trajectories`` shards.
"""
