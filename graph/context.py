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
