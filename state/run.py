"""The run state: one LangGraph thread's whole story."""
from __future__ import annotations

import operator
from typing import Annotated

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from hardware_profiles import HardwareProfile
from state.candidate import KernelCandidate
from state.evaluation import Evaluation
from state.profile import KernelProfile
from state.records import Budget, DesignRecord, StageAttempt
from state.task import TaskAnalysis, TaskSpec


class LLMConfig(BaseModel):
    """LLM agent settings (no secrets: the API key is read from an environment variable)."""
    base_url: str | None = None  # default: $OPENAI_BASE_URL, else OpenAI's
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.2, ge=0.0, le=2.0)
    max_tokens: int = Field(8192, ge=1)
    max_retries: int = Field(2, ge=0)  # transport-level retries inside the client
    timeout_s: float = Field(300.0, gt=0)
    reply_attempts: int = Field(3, ge=1)  # malformed or unusable replies retried with the problem as feedback
    context_chars: int = Field(24000, ge=1000)  # the prompt's budget: recent attempts verbatim, older ones summarized


class RunSettings(BaseModel):
    """What a run was started with; resume rebuilds the runtime context from it."""
    task_path: str
    agent: str = "expert"
    llm: LLMConfig = Field(default_factory=LLMConfig)
    profile: str | None = None  # None: detect the live device
    budget: Budget = Field(default_factory=Budget)
    out_dir: str = "egg_out"
    evaluator: Literal["auto", "gpu", "compile_only"] = "auto"
    # "auto": the agent's choice per candidate; "strict": no torch compute in any candidate; "mixed":
    # torch library ops allowed beside the candidate's own kernels (shared/NOTES.md)
    guard_policy: Literal["auto", "strict", "mixed"] = "auto"
    review: bool = False  # pause before each stage (LangGraph interrupt) for a person to approve, edit or skip
    forked_from: str | None = None  # "THREAD@stage" for a branch made by `egg fork`
    timing_reps: int = Field(50, ge=1)  # timed repetitions per candidate and baseline (median reported)
    # "float64": error against a float64 truth within a multiple of eager's own (default);
    # "kernelbench": KernelBench's own torch.allclose against eager, 5 trials (for comparable figures)
    tolerance: Literal["float64", "kernelbench"] = "float64"
    # Nsight Compute on each stage's best candidate (GPU runs with ncu); the next stage's agent reads it
    kernel_profile: bool = True


class VerifyTask(BaseModel):
    """The payload of one `Send` to the per-candidate verification worker."""
    candidate: KernelCandidate
    task_path: str
    task: TaskSpec | None = None  # the stored copy (verification loads this, not the user's file)
    settings: RunSettings
    floor_ms: float | None = None
    round: int = 0


class ReviewDecision(BaseModel):
    """What a reviewer answers at a stage's pause ("approve" alone is accepted for the action)."""
    action: Literal["approve", "edit", "skip"] = "approve"
    params: list[dict[str, int | float | str | bool]] = Field(default_factory=list)  # with "edit"

    @model_validator(mode="before")
    @classmethod
    def _from_word(cls, v):
        return {"action": v} if isinstance(v, str) else v


class FinalResult(BaseModel):
    status: str  # "verified", "unverified", "failed", "unsupported"
    message: str = ""
    best_id: str | None = None
    best_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    kernel_path: str | None = None
    module_path: str | None = None
    report_path: str | None = None


class RunState(BaseModel):
    settings: RunSettings
    task: TaskSpec | None = None
    profile: HardwareProfile | None = None  # resolved once by analysis; a resume keeps it
    analysis: TaskAnalysis | None = None
    stage: str = "analysis"
    round: int = 0
    candidates: Annotated[list[KernelCandidate], operator.add] = Field(default_factory=list)
    pending: list[str] = Field(default_factory=list)  # candidate ids awaiting verification
    evaluations: Annotated[list[Evaluation], operator.add] = Field(default_factory=list)
    profiles: Annotated[list[KernelProfile], operator.add] = Field(default_factory=list)  # stage bests, by ncu
    attempts: Annotated[list[StageAttempt], operator.add] = Field(default_factory=list)
    design: DesignRecord = Field(default_factory=DesignRecord)
    stage_done: bool = False
    failure: str | None = None  # set when the run cannot go on (unsupported, no correct kernel)
    result: FinalResult | None = None

    def candidate(self, cid: str) -> KernelCandidate:
        for c in self.candidates:
            if c.id == cid:
                return c
        raise KeyError(cid)

    def evaluation(self, cid: str) -> Evaluation | None:
        for e in reversed(self.evaluations):
            if e.candidate_id == cid:
                return e
        return None

    def kernel_profile(self, cid: str | None) -> KernelProfile | None:
        return next((p for p in reversed(self.profiles) if p.candidate_id == cid), None) if cid else None

    def stage_attempts(self, stage: str) -> list[StageAttempt]:
        return [a for a in self.attempts if a.stage == stage]
