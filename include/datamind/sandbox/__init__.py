"""Isolated code execution for trajectory sampling (see session.py for the API)."""

from datamind.sandbox.limits import SandboxLimits, SandboxUnavailable
from datamind.sandbox.session import Observation, Sandbox, Session

__all__ = ["Observation", "Sandbox", "SandboxLimits", "SandboxUnavailable", "Session"]
