"""Offline (no-LLM) query synthesis: parameterized templates with executed reference solutions."""
