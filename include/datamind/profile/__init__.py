"""Profiling: per table, the compact metadata (``meta_info``) the query-synthesis prompts consume.

``meta`` profiles one DataFrame; ``stage`` plans and runs profiling shards into ``catalog/tables``.
"""
