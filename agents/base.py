"""The protocol every agent implements, and the registry that builds one by name."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from hardware_profiles import HardwareProfile
from state import DesignRecord, KernelCandidate, Param, StageAttempt, TaskAnalysis, TaskSpec


class StageRequest(BaseModel):
    """Everything an agent is given for one round of one stage."""
    stage: str
    round: int
    task: TaskSpec
    analysis: TaskAnalysis | None
    profile: HardwareProfile
    design: DesignRecord  # inter-stage: decisions so far, the best kernel
    attempts: list[StageAttempt]  # intra-stage: this stage's attempts so far
    best: KernelCandidate | None  # the kernel this stage starts from (None in algorithm design)
    max_candidates: int
    # a reviewer's edit: knob values to use instead of the agent's own choice (merged onto the stage's base)
    params_override: list[dict[str, Param]] | None = None


class ProposedKernel(BaseModel):
    cuda_source: str
    host_code: str
    kernel_names: list[str]
    params: dict[str, Param] = Field(default_factory=dict)
    compile_options: list[str] = Field(default_factory=list)
    description: str = ""
    family: str = ""
    guard_policy: str = "strict"


class Proposal(BaseModel):
    kernels: list[ProposedKernel] = Field(default_factory=list)
    plan: str = ""
    unsupported: str | None = None  # set when the agent cannot handle the task; names the op


@runtime_checkable
class Agent(Protocol):
    name: str

    def propose(self, req: StageRequest) -> Proposal: ...


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
