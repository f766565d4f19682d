"""Trajectory sampling: ``stage`` plans shards over the ``queries`` table and writes ``trajectories`` shards,
running N agents (``datamind.agent``) per query.
"""
