"""What an LLM must reply: pydantic models, validated; a bad reply becomes feedback, not a crash."""
from __future__ import annotations

from pydantic import BaseModel, Field


class KernelDraft(BaseModel):
    cuda_source: str = Field(description="complete CUDA C source; kernels declared extern \"C\" __global__")
    host_code: str = Field(description="Python defining class ModelNew(nn.Module); allocate outputs with "
                                       "egg.empty(shape, dtype, device) and launch with "
                                       "egg.launch(name, grid, block, [out, inputs..., sizes...], shared_mem=0)")
    kernel_names: list[str] = Field(description="the extern \"C\" kernel names the host code launches")
    params: dict[str, int | float | str | bool] = Field(default_factory=dict,
                                                        description="this stage's knobs and their values")
    description: str = ""


class StageReply(BaseModel):
    plan: str = Field(default="", description="what this stage changes and why, in a few sentences")
    kernels: list[KernelDraft] = Field(default_factory=list)
