"""A kernel's hardware profile (Nsight Compute), compact enough for a prompt and a checkpoint."""
from __future__ import annotations

from pydantic import BaseModel, Field


class KernelProfile(BaseModel):
    candidate_id: str
    kernel: str = ""  # the kernel these metrics are of (the longest-running one of the candidate)
    available: bool = True  # False: no profile, `note` says why (no ncu, no counters, it failed)
    note: str = ""
    duration_ms: float | None = None
    sm_pct: float | None = None  # Compute (SM) throughput, % of peak
    memory_pct: float | None = None  # the busiest memory unit, % of peak
    dram_pct: float | None = None
    l1_pct: float | None = None
    l2_pct: float | None = None
    l2_hit_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers: int | None = None
    shared_bytes: int | None = None  # static + dynamic, per block
    ipc: float | None = None  # executed instructions per cycle, per SM
    warp_cycles_per_issue: float | None = None
    busiest_pipe: str = ""  # e.g. "ALU", "FMA", "Tensor"
    busiest_pipe_pct: float | None = None
    tensor_pipe_pct: float | None = None
    dram_bytes: float | None = None
    stalls: dict[str, float] = Field(default_factory=dict)  # top stall reasons: cycles per issued instruction
    other_kernels: list[str] = Field(default_factory=list)  # the candidate's other kernels, "name: ms"

    @property
    def limiter(self) -> str:
        """'memory', 'compute' or 'latency' (neither unit past 60% of its peak), '' when unknown."""
        if self.sm_pct is None or self.memory_pct is None:
            return ""
        if max(self.sm_pct, self.memory_pct) < 60:
            return "latency"
        return "memory" if self.memory_pct >= self.sm_pct else "compute"

    def summary(self) -> str:
        """One line for a prompt, `egg history` and the report."""
        if not self.available:
            return f"no profile ({self.note})" if self.note else "no profile"

        def pct(v):
            return "-" if v is None else f"{v:.0f}%"
        parts = [f"{self.kernel}: {self.limiter or 'unknown'}-limited", f"SM {pct(self.sm_pct)}",
                 f"memory {pct(self.memory_pct)} (DRAM {pct(self.dram_pct)}, L2 {pct(self.l2_pct)}, L1 {pct(self.l1_pct)})"]
        if self.achieved_occupancy_pct is not None:
            parts.append(f"occupancy {pct(self.achieved_occupancy_pct)} of {pct(self.theoretical_occupancy_pct)}")
        if self.registers is not None:
            parts.append(f"{self.registers} regs")
        if self.shared_bytes:
            parts.append(f"{self.shared_bytes // 1024} KB smem")
        if self.ipc is not None:
            parts.append(f"IPC {self.ipc:.2f}")
        if self.warp_cycles_per_issue is not None:
            parts.append(f"{self.warp_cycles_per_issue:.1f} cycles/issue")
        if self.busiest_pipe:
            parts.append(f"busiest pipe {self.busiest_pipe} {pct(self.busiest_pipe_pct)}")
        if self.tensor_pipe_pct is not None:
            parts.append(f"tensor pipe {pct(self.tensor_pipe_pct)}")
        if self.l2_hit_pct is not None:
            parts.append(f"L2 hit {pct(self.l2_hit_pct)}")
        if self.stalls:
            parts.append("stalls " + ", ".join(f"{k} {v:.1f}" for k, v in list(self.stalls.items())[:3]))
        return "; ".join(parts)
