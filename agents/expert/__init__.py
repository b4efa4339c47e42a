"""The embedded expert agent (the default): offline, deterministic, template-based."""
from agents.expert.agent import ExpertAgent

__all__ = ["ExpertAgent"]
