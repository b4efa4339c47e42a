"""Evaluators: how verification turns candidates into Evaluations.

`GpuEvaluator` compiles with CuPy and verifies in a sandboxed worker process.
`CompileOnlyEvaluator` (no GPU) compiles through NVRTC for the profile's arch and
reports errors and resources; its verdict `compiled_only` never counts as correct.
"""
from __future__ import annotations

import threading
from typing import Protocol

from pydantic import BaseModel

from runtime.compile import compile_check
from runtime.profiler import profile_candidate
from runtime.sandbox import SandboxWorker, WorkerDied, WorkerTimeout
from state import Evaluation, KernelCandidate, KernelProfile, Timing, Verdict


class Baselines(BaseModel):
    eager: Timing | None = None
    compiled: Timing | None = None
    device: str = "cpu"
    note: str = ""
    eager_err: float | None = None  # eager's norm-wise error vs float64 where it may run reduced precision
    eager_exact_err: float | None = None  # the same with TF32 off: far below eager_err where eager ran TF32


class Evaluator(Protocol):
    kind: str

    def baselines(self, task_path: str) -> Baselines: ...

    def evaluate(self, task_path: str, candidates: list[KernelCandidate], floor_ms: float | None) -> list[Evaluation]: ...

    def close(self) -> None: ...

    # optional: `profile(task_path, candidate) -> KernelProfile` (Nsight Compute), where the evaluator has a GPU


class CompileOnlyEvaluator:
    kind = "compile_only"

    def __init__(self, arch: str = "sm_90a"):
        self.arch = arch

    def baselines(self, task_path: str) -> Baselines:
        return Baselines(note="no CUDA device: baselines not timed")

    def evaluate(self, task_path, candidates, floor_ms):
        out = []
        for c in candidates:
            res = compile_check(c.cuda_source, c.compile_options, self.arch)
            missing = [n for n in c.kernel_names if res.ok and n not in {r.name for r in res.resources}]
            if res.ok and not missing:
                v, why = Verdict.compiled_only, "compiled; no CUDA device to verify it on"
            elif res.ok:
                v, why = Verdict.compile_error, f"kernel(s) not found in the module: {', '.join(missing)}"
            else:
                v, why = Verdict.compile_error, "; ".join(e.message for e in res.errors[:3]) or "compile failed"
            out.append(Evaluation(candidate_id=c.id, stage=c.stage, verdict=v, reason=why, compile=res,
                                  guard_policy=c.guard_policy))
        return out

    def close(self) -> None:
        pass


FLOOR_SLACK = 0.85  # a time under 85% of the roofline floor is not believed


class GpuEvaluator:
    """Two sandboxed processes: the candidate worker verifies and times candidates; the baseline
    worker times eager and torch.compile and never runs candidate code, so no host code can reach
    the baselines. A candidate's speedup is the baseline measured right after it, over its time."""
    kind = "gpu"

    def __init__(self, arch: str | None = None, timeout_s: float = 180.0, reps: int = 50, trials: int = 3,
                 tolerance: str = "float64", compile_baseline: bool | str = True):
        if tolerance not in ("float64", "kernelbench"):
            raise ValueError(f"unknown tolerance {tolerance!r} (float64, kernelbench)")
        self.arch, self.timeout_s, self.reps, self.trials, self.tolerance = arch, timeout_s, reps, trials, tolerance
        self.compile_baseline = compile_baseline
        self.workers: dict[str, SandboxWorker] = {}
        self.lock = threading.Lock()  # one GPU: fanned-out verifications take turns

    def _worker(self, role: str, task_path: str) -> SandboxWorker:
        w = self.workers.get(role)
        if w is None:
            w = self.workers[role] = SandboxWorker(task_path, role=role, tolerance=self.tolerance,
                                                   compile_baseline=self.compile_baseline)
        w.switch(task_path)
        return w

    @property
    def worker(self) -> SandboxWorker | None:  # the candidate worker (tests kill it to check restarts)
        return self.workers.get("candidate")

    def _baselines(self, task_path: str) -> Baselines:
        w = self._worker("baseline", task_path)
        r = w.request("baselines", self.reps, timeout=900)
        if not r.get("ok"):
            raise RuntimeError(f"baseline timing failed: {r.get('error')}")
        return Baselines(eager=r["eager"], compiled=r["compiled"], device=w.info.get("device", "cuda"), note=r["note"],
                         eager_err=r.get("eager_err"), eager_exact_err=r.get("eager_exact_err"))

    def baselines(self, task_path: str) -> Baselines:
        with self.lock:
            return self._baselines(task_path)

    def evaluate(self, task_path, candidates, floor_ms):
        with self.lock:
            return [self._one(task_path, c, floor_ms) for c in candidates]

    def _one(self, task_path, c, floor_ms) -> Evaluation:
        try:
            w = self._worker("candidate", task_path)
            req = {"candidate": c.model_dump(mode="json"), "reps": self.reps, "trials": self.trials,
                   "arch": self.arch, "precision_note": w.info.get("precision_note", "")}
            r = w.request("evaluate", req, timeout=self.timeout_s)
            if not r.get("ok"):
                ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=Verdict.crashed,
                                reason=f"worker error: {r.get('error')}"[:500])
            else:
                ev = Evaluation.model_validate(r["evaluation"])
                if ev.verdict == Verdict.correct:
                    self._speedups(ev, self._baselines(task_path), floor_ms)
                return ev
        except WorkerTimeout as exc:
            ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=Verdict.timed_out, reason=str(exc))
        except WorkerDied as exc:
            ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=Verdict.crashed, reason=str(exc))
        ev.guard_policy = c.guard_policy
        return ev

    @staticmethod
    def _speedups(ev: Evaluation, base: Baselines, floor_ms: float | None) -> None:
        med = ev.timing.median_ms
        ev.eager, ev.compiled = base.eager, base.compiled
        if base.eager:
            ev.speedup_vs_eager = base.eager.median_ms / med
        if base.compiled:
            ev.speedup_vs_compile = base.compiled.median_ms / med
        floor = float(floor_ms or 0.0)
        if floor > 0:
            ev.roofline_fraction = floor / med
            if med < floor * FLOOR_SLACK:
                ev.flagged = f"faster than the roofline floor ({med:.4f} ms < {floor:.4f} ms): not believed"

    def profile(self, task_path: str, cand: KernelCandidate, kernels: list[str] | None = None) -> KernelProfile:
        """Nsight Compute on one candidate (or on `kernels` of it), in its own process (ncu must start the
        process it profiles)."""
        with self.lock:
            try:
                return profile_candidate(task_path, cand, self.arch, kernels=kernels)
            except Exception as exc:  # a profile is advice: its failure never fails the run
                return KernelProfile(candidate_id=cand.id, available=False, note=f"{type(exc).__name__}: {exc}"[:300])

    def close(self) -> None:
        for w in self.workers.values():
            w.close()
        self.workers = {}


def gpu_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def make_evaluator(kind: str, arch: str, reps: int = 50, tolerance: str = "float64", compile_baseline: bool | str = True,
                   **kw) -> Evaluator:
    if kind == "auto":
        kind = "gpu" if gpu_available() else "compile_only"
    if kind == "gpu":
        return GpuEvaluator(arch=arch, reps=reps, tolerance=tolerance, compile_baseline=compile_baseline, **kw)
    if kind == "compile_only":
        return CompileOnlyEvaluator(arch=arch)
    raise ValueError(f"unknown evaluator {kind!r} (auto, gpu, compile_only)")
