"""The run's context: what every node reads from LangGraph's `Runtime` (the agent, the evaluator
and the hardware profile). It is not checkpointed.

Whoever runs the graph builds it (graph.runner, the bench, a Ray slot) and closes it when the run
ends. The graph served by `langgraph dev` / Studio gets none, so `resolve` builds one per process
from the checkpointed settings, closed when the process exits. Below the nodes: nothing here
imports graph/ or nodes/.
"""
from __future__ import annotations

import atexit
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.protocol import Agent
from hardware_profiles import HardwareProfile, detect, load_profile
if TYPE_CHECKING:  # torch comes with it: `egg --help` parses before anything heavy is imported
    from runtime.evaluator import Evaluator

DEFAULT_PROFILE = "h200"  # the project's target when no GPU is present to detect


@dataclass
class EggContext:
    # None where the caller (Studio's server passes an empty context) left it to the settings
    agent: Agent | None = None
    evaluator: Evaluator | None = None
    profile: HardwareProfile | None = None

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()


def resolve_profile(name: str | None) -> HardwareProfile:
    """The named profile, else the live GPU's, else the project's default target."""
    if name:
        return load_profile(name)
    try:
        return detect()
    except RuntimeError:
        return load_profile(DEFAULT_PROFILE)


def build_context(settings, agent=None, evaluator=None, profile: HardwareProfile | None = None) -> EggContext:
    """The context for a run with these settings; `profile` (the one stored in a run's state) wins
    over detection, so a resumed run tunes against the roofline it started with."""
    from agents.registry import make_agent
    from runtime.evaluator import make_evaluator
    profile = profile or resolve_profile(settings.profile)
    return EggContext(agent=agent or make_agent(settings.agent, settings.llm),
                      evaluator=evaluator or make_evaluator(settings.evaluator, profile.arch, reps=settings.timing_reps,
                                                               tolerance=settings.tolerance),
                      profile=profile)


_BUILT: dict[str, EggContext] = {}


@atexit.register
def _close_built() -> None:
    for ctx in _BUILT.values():
        ctx.close()
    _BUILT.clear()


def resolve(runtime, settings) -> EggContext:
    """The run's context: the one the runner passed, or (Studio, `langgraph dev`, which pass none)
    one built once per process from the checkpointed settings."""
    given = runtime.context
    if given is not None and None not in (given.agent, given.evaluator, given.profile):
        return given
    key = settings.model_dump_json()
    if key not in _BUILT:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _BUILT[key] = build_context(settings)
    built = _BUILT[key]
    if given is None:
        return built
    return EggContext(agent=given.agent or built.agent, evaluator=given.evaluator or built.evaluator,
                      profile=given.profile or built.profile)
