"""Build an agent by name. Apart from the protocol (agents/protocol.py), which nodes and
implementations import without pulling every implementation in."""
from __future__ import annotations

from agents.protocol import Agent


class UnknownAgentError(ValueError):
    pass


def make_agent(spec: str, llm=None) -> Agent:
    """'expert' (default), 'openai:MODEL', 'hybrid:MODEL', or 'module:factory' for custom agents."""
    if spec == "expert":
        from agents.expert import ExpertAgent
        return ExpertAgent()
    if spec.startswith(("openai:", "hybrid:")):
        kind, _, model = spec.partition(":")
        if not model:
            raise UnknownAgentError(f"{spec!r}: name the model, e.g. {kind}:gpt-4o")
        from agents.llm import HybridAgent, LLMAgent
        agent = LLMAgent(model, llm)
        return agent if kind == "openai" else HybridAgent(agent)
    if ":" in spec and not spec.startswith(("openai:", "hybrid:")):
        import importlib
        mod, _, attr = spec.partition(":")
        try:
            return getattr(importlib.import_module(mod), attr)()
        except (ImportError, AttributeError) as exc:
            raise UnknownAgentError(f"cannot load agent {spec!r}: {exc}") from None
    raise UnknownAgentError(f"unknown agent {spec!r} (known: expert, openai:MODEL, hybrid:MODEL, module:factory)")
