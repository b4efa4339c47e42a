"""The runtime context handed to every node (LangGraph `context_schema`): not checkpointed,
rebuilt from `RunSettings` on resume."""
from __future__ import annotations

from dataclasses import dataclass

from agents.base import Agent
from hardware_profiles import HardwareProfile
from runtime.evaluator import Evaluator


@dataclass
class EggContext:
    agent: Agent
    evaluator: Evaluator
    profile: HardwareProfile


_BUILT: dict[str, EggContext] = {}


def resolve(runtime, settings) -> EggContext:
    """The run's context: the one the runner passed, or (Studio, `langgraph dev`, which pass
    none) one built once per process from the checkpointed settings."""
    if runtime.context is not None:
        return runtime.context
    key = settings.model_dump_json()
    if key not in _BUILT:
        from graph.runner import make_context  # the runner builds agents and evaluators
        _BUILT[key] = make_context(settings)
    return _BUILT[key]
