"""The runtime context handed to every node (LangGraph `context_schema`): not checkpointed,
rebuilt from `RunSettings` on resume."""
from __future__ import annotations

from dataclasses import dataclass

from agents.base import Agent
from hardware_profiles import HardwareProfile
from runtime.evaluator import Evaluator


@dataclass
class EggContext:
    # None where the caller (Studio's server passes an empty context) left it to the settings
    agent: Agent | None = None
    evaluator: Evaluator | None = None
    profile: HardwareProfile | None = None


_BUILT: dict[str, EggContext] = {}


def resolve(runtime, settings) -> EggContext:
    """The run's context: the one the runner passed, or (Studio, `langgraph dev`, which pass
    none) one built once per process from the checkpointed settings."""
    given = runtime.context
    if given is not None and None not in (given.agent, given.evaluator, given.profile):
        return given
    key = settings.model_dump_json()
    if key not in _BUILT:
        from graph.runner import make_context  # the runner builds agents and evaluators
        _BUILT[key] = make_context(settings)
    built = _BUILT[key]
    if given is None:
        return built
    return EggContext(agent=given.agent or built.agent, evaluator=given.evaluator or built.evaluator,
                      profile=given.profile or built.profile)
