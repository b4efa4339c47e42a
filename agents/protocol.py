"""The protocol every agent implements: what it is asked (StageRequest) and what it answers (Proposal).
The factory that builds an agent by name is agents/registry.py."""
from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from hardware_profiles import HardwareProfile
from state import DesignRecord, KernelCandidate, KernelProfile, Param, StageAttempt, TaskAnalysis, TaskSpec


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
    best_profile: KernelProfile | None = None  # its Nsight Compute profile, where one was taken
    best_kernel_ms: dict[str, float] = Field(default_factory=dict)  # its kernels' times within a call (a program's regions)
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
    guard_policy: Literal["strict", "mixed"] = "strict"  # a wish: the run's settings may make it stricter
    algorithm_flops: float | None = None  # set by the expert for its algebraic rewrites (KernelCandidate)


class Proposal(BaseModel):
    kernels: list[ProposedKernel] = Field(default_factory=list)
    plan: str = ""
    unsupported: str | None = None  # set when the agent cannot handle the task; names the op
    error: str | None = None  # the agent itself failed (endpoint unreachable, auth): the run fails with this


@runtime_checkable
class Agent(Protocol):
    name: str

    def propose(self, req: StageRequest) -> Proposal: ...

    # optional: `precheck(task_path) -> str | None`, why the agent cannot cover a task (asked before
    # baselines are timed, so an unsupported task costs seconds)
