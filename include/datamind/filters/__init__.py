"""Rule-based trajectory filters (paper section 3.2): format compliance, answer length, linguistic integrity.

Each rule takes a dataset row (``messages``, ``final_answer``) and returns None when it passes or a
:class:`~datamind.filters.rules.Finding` (reason code + human reason) when it fails.
"""
