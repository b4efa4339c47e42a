"""Typed records that cross nodes and persist in checkpoints.

Every class here is a pydantic model; `ALL_MODELS` lists them so the checkpoint
serializer can allow exactly these classes (see graph/checkpointing.py).
"""
from state.task import TF32_GRADE, eager_ran_tf32, TaskSpec, TensorSpec, Roofline, TaskAnalysis
from state.candidate import DRAW_OPS, MASK_OPS, MODULE_PART, KernelCandidate, Param, module_parts
from state.evaluation import (
    CompileError, KernelResources, CompileResult, CorrectnessResult, OutputError, Timing,
    Evaluation, Verdict,
)
from hardware_profiles import HardwareProfile
from state.profile import KernelProfile
from state.records import (StageAttempt, StageDecision, DesignRecord, Budget, STAGES, TUNING_STAGES, STAGE_TABLE,
                           NEXT_STAGE, StageName)
from state.run import RunState, RunSettings, FinalResult, LLMConfig, VerifyTask, ReviewDecision

ALL_MODELS = [
    TaskSpec, TensorSpec, Roofline, TaskAnalysis, KernelCandidate, CompileError,
    KernelResources, CompileResult, CorrectnessResult, OutputError, Timing, Evaluation,
    StageAttempt, StageDecision, DesignRecord, Budget, VerifyTask, RunState, RunSettings, FinalResult, LLMConfig,
    ReviewDecision, HardwareProfile, KernelProfile,
]
ALL_ENUMS = [Verdict]

__all__ = [m.__name__ for m in ALL_MODELS] + ["Verdict", "Param", "DRAW_OPS", "MASK_OPS", "MODULE_PART", "module_parts", "STAGES", "TUNING_STAGES",
                                              "STAGE_TABLE", "NEXT_STAGE", "StageName", "ALL_MODELS", "ALL_ENUMS", "TF32_GRADE",
                                              "eager_ran_tf32"]
