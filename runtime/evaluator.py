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
from runtime.sandbox import SandboxWorker, WorkerDied, WorkerTimeout
from state import Evaluation, KernelCandidate, Timing, Verdict


class Baselines(BaseModel):
    eager: Timing | None = None
    compiled: Timing | None = None
    device: str = "cpu"
    note: str = ""


class Evaluator(Protocol):
    kind: str

    def baselines(self, task_path: str) -> Baselines: ...

    def evaluate(self, task_path: str, candidates: list[KernelCandidate], floor_ms: float | None) -> list[Evaluation]: ...

    def close(self) -> None: ...


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


class GpuEvaluator:
    kind = "gpu"

    def __init__(self, arch: str | None = None, timeout_s: float = 180.0, reps: int = 50, trials: int = 3):
        self.arch, self.timeout_s, self.reps, self.trials = arch, timeout_s, reps, trials
        self.worker: SandboxWorker | None = None
        self.lock = threading.Lock()  # one GPU, one worker: fanned-out verifications take turns

    def _worker(self, task_path: str) -> SandboxWorker:
        if self.worker is None:
            self.worker = SandboxWorker(task_path)
        self.worker.switch(task_path)
        return self.worker

    def baselines(self, task_path: str) -> Baselines:
        with self.lock:
            w = self._worker(task_path)
            r = w.request("baselines", self.reps, timeout=900)
        if not r.get("ok"):
            raise RuntimeError(f"baseline timing failed: {r.get('error')}")
        return Baselines(eager=r["eager"], compiled=r["compiled"], device=w.info.get("device", "cuda"), note=r["note"])

    def evaluate(self, task_path, candidates, floor_ms):
        with self.lock:
            return [self._one(task_path, c, floor_ms) for c in candidates]

    def _one(self, task_path, c, floor_ms) -> Evaluation:
        req = {"candidate": c.model_dump(mode="json"), "reps": self.reps, "trials": self.trials,
               "floor_ms": floor_ms, "arch": self.arch}
        try:
            r = self._worker(task_path).request("evaluate", req, timeout=self.timeout_s)
            if r.get("ok"):
                return Evaluation.model_validate(r["evaluation"])
            ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=Verdict.crashed,
                            reason=f"worker error: {r.get('error')}"[:500])
        except WorkerTimeout as exc:
            ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=Verdict.timed_out, reason=str(exc))
        except WorkerDied as exc:
            ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=Verdict.crashed, reason=str(exc))
        ev.guard_policy = c.guard_policy
        return ev

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def gpu_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def make_evaluator(kind: str, arch: str, reps: int = 50, **kw) -> Evaluator:
    if kind == "auto":
        kind = "gpu" if gpu_available() else "compile_only"
    if kind == "gpu":
        return GpuEvaluator(arch=arch, reps=reps, **kw)
    if kind == "compile_only":
        return CompileOnlyEvaluator(arch=arch)
    raise ValueError(f"unknown evaluator {kind!r} (auto, gpu, compile_only)")
