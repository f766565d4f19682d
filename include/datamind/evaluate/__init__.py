"""Evaluate agents on benchmark suites (the paper's appendix D protocol); see stage.py."""
