"""The evaluation worker: runs in its own (spawned) process and owns the GPU.

The parent (runtime/sandbox.py) sends requests over a pipe; a fault here costs
this process, never the run. Requests: ("setup", task_path), ("baselines", reps),
("evaluate", {candidate, ...}). Replies are plain dicts (pydantic dumps).
"""
from __future__ import annotations

import random
import threading
import time
import traceback

import numpy as np
import torch

from runtime import guard
from runtime.compile import load_module
from runtime.correctness import compare, degenerate_input, as_list
from runtime.kernel_api import KernelAPI
from runtime.timing import L2Flusher, time_interleaved
from state import CorrectnessResult, Evaluation, KernelCandidate, Verdict
from tasks.loader import load_task

FLOOR_SLACK = 0.85  # a time under 85% of the roofline floor is not believed
SIDE_STREAM_SLACK_MS = 0.05


class FatalCudaError(RuntimeError):
    """The CUDA context may be broken: the process must end after replying."""


def _is_cuda_fault(exc: BaseException) -> bool:
    s = f"{type(exc).__name__} {exc}"
    return any(k in s for k in ("illegal memory access", "misaligned address", "unspecified launch failure",
                                "illegal instruction", "CUDA error", "cudaError", "an illegal", "launch timed out"))


def _clone(xs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


class Worker:
    def __init__(self):
        self.task = None
        self.ref = None
        self.compiled = None
        self.compile_note = ""
        self.ref_compute: list[str] = []
        self.flusher = None
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    # -- requests -----------------------------------------------------------------------
    def setup(self, task_path: str) -> dict:
        self.task = self.ref = self.compiled = None  # free the previous task's model first
        self.compile_note = ""
        torch.cuda.empty_cache()
        self.task = load_task(task_path)
        self.ref = self.task.make_model(42).cuda().eval()
        self.flusher = self.flusher or L2Flusher()
        inputs = self.task.make_inputs(1, 'cuda')
        with torch.no_grad(), guard.OpRecorder() as rec:
            out = self.ref(*inputs)
        self.ref_compute = guard.compute_ops(rec.ops)
        torch.cuda.synchronize()
        return {"outputs": [[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in as_list(out)
                            if isinstance(o, torch.Tensor)],
                "reference_ops": self.ref_compute,
                "device": torch.cuda.get_device_name()}

    def _compiled_ref(self):
        if self.compiled is None and not self.compile_note:
            try:
                self.compiled = torch.compile(self.ref)
                with torch.no_grad():
                    self.compiled(*self.task.make_inputs(1, 'cuda'))
                torch.cuda.synchronize()
            except Exception as exc:  # inductor may fail on some graphs; eager still stands
                self.compiled, self.compile_note = None, f"torch.compile failed: {type(exc).__name__}: {exc}"[:300]
        return self.compiled

    def baselines(self, reps: int) -> dict:
        inputs = self.task.make_inputs(7, 'cuda')
        fns = {"eager": lambda: self.ref(*inputs)}
        if (c := self._compiled_ref()) is not None:
            fns["compiled"] = lambda: c(*inputs)
        with torch.no_grad():
            t = time_interleaved(fns, reps=reps, flusher=self.flusher)
        return {"eager": t["eager"].model_dump(), "compiled": t["compiled"].model_dump() if "compiled" in t else None,
                "note": self.compile_note}

    def evaluate(self, req: dict) -> dict:
        cand = KernelCandidate.model_validate(req["candidate"])
        ev = Evaluation(candidate_id=cand.id, stage=cand.stage, verdict=Verdict.incorrect,
                        guard_policy=cand.guard_policy)
        try:
            self._evaluate(cand, ev, req)
        except FatalCudaError as exc:
            ev.verdict, ev.reason = Verdict.crashed, f"CUDA fault: {exc}"[:500]
            return {"evaluation": ev.model_dump(mode="json"), "fatal": True}
        except Exception as exc:
            if _is_cuda_fault(exc):
                ev.verdict, ev.reason = Verdict.crashed, f"CUDA fault: {type(exc).__name__}: {exc}"[:500]
                return {"evaluation": ev.model_dump(mode="json"), "fatal": True}
            ev.verdict = Verdict.incorrect
            ev.reason = f"raised {type(exc).__name__}: {exc}"[:500]
            ev.correctness = CorrectnessResult(passed=False, trials=0, detail=traceback.format_exc()[-1500:])
        return {"evaluation": ev.model_dump(mode="json"), "fatal": False}

    # -- one candidate --------------------------------------------------------------------
    def _sync(self):
        try:
            torch.cuda.synchronize()
        except Exception as exc:
            raise FatalCudaError(f"{type(exc).__name__}: {exc}") from exc

    def _evaluate(self, cand: KernelCandidate, ev: Evaluation, req: dict) -> None:
        mod, cres = load_module(cand.cuda_source, cand.kernel_names, cand.compile_options, req.get("arch"))
        ev.compile = cres
        if mod is None:
            ev.verdict, ev.reason = Verdict.compile_error, "; ".join(e.message for e in cres.errors[:3]) or "compile failed"
            return
        api = KernelAPI(mod, poison=True)
        env = {"__name__": "egg_candidate", "egg": api, "torch": torch, "nn": torch.nn, "np": np}
        exec(compile(cand.host_code, f"<candidate {cand.id} host code>", "exec"), env)
        if "ModelNew" not in env:
            ev.reason = "host code defines no ModelNew"
            return
        torch.manual_seed(42)
        new = env["ModelNew"](*self.task.init_inputs()).cuda().eval()
        ref_state = self.ref.state_dict()
        for ref_name, own in getattr(new, "PARAM_MAP", {}).items():
            dest = dict(new.named_parameters()).get(own)
            if dest is None:
                dest = dict(new.named_buffers())[own]
            dest.data.copy_(ref_state[ref_name])

        trials = int(req.get("trials", 3))
        base = random.SystemRandom().randrange(1, 2**30)  # fresh inputs every evaluation
        kept = []  # every trial's tensors stay alive: pointer-keyed caches see new addresses
        ops: list[str] = []
        worst_abs = worst_rel = 0.0
        atol = rtol = None
        for t in range(trials):
            inputs = self.task.make_inputs(base + t, 'cuda')
            if any(degenerate_input(x) for x in inputs):
                ev.reason = "the task's get_inputs() gave a constant input; refusing to verify on it"
                return
            with torch.no_grad():
                ref_out = self.ref(*_clone(inputs))
            cin, snap = _clone(inputs), _clone(inputs)
            threads = threading.active_count()
            launches = api.launches
            with torch.no_grad(), guard.OpRecorder() as rec:
                out = new(*cin)
            self._sync()
            ops += [o for o in rec.ops if o not in ops]
            if threading.active_count() > threads:
                ev.verdict, ev.reason = Verdict.rejected, "forward left a thread running"
                return
            if api.launches == launches:
                ev.verdict, ev.reason = Verdict.rejected, "forward launched no kernel of its own"
                ev.aten_ops = ops
                return
            for a, b in zip(cin, snap):
                if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                    ev.reason = "forward modified its inputs"
                    return
            prev_ptrs = {o.data_ptr() for k in kept for o in as_list(k[1]) if isinstance(o, torch.Tensor)}
            if any(isinstance(o, torch.Tensor) and o.data_ptr() in prev_ptrs for o in as_list(out)):
                ev.verdict, ev.reason = Verdict.rejected, "returned a tensor from an earlier call (output caching)"
                return
            ok, detail, a_err, r_err, atol, rtol = compare(out, ref_out)
            worst_abs, worst_rel = max(worst_abs, a_err), max(worst_rel, r_err)
            if ok and t == 0:  # run again on the same inputs: garbage that passes once fails here
                with torch.no_grad():
                    out2 = new(*_clone(inputs))
                self._sync()
                ok, detail, *_ = compare(out2, ref_out)
                detail = f"second run on the same inputs: {detail}" if not ok else ""
            if not ok:
                ev.correctness = CorrectnessResult(passed=False, trials=t + 1, max_abs_err=a_err, max_rel_err=r_err,
                                                   atol=atol, rtol=rtol, detail=f"trial {t} (seed {base + t}): {detail}")
                ev.reason = ev.correctness.detail[:300]
                ev.aten_ops = ops
                return
            kept.append((inputs, out))
        ev.aten_ops = ops
        ev.correctness = CorrectnessResult(passed=True, trials=trials, max_abs_err=worst_abs, max_rel_err=worst_rel,
                                           atol=atol, rtol=rtol, detail=f"seeds {base}..{base + trials - 1}")
        why = guard.judge(cand.guard_policy, ops, own_launches=1, reference_compute=self.ref_compute)
        if why:
            ev.verdict, ev.reason = Verdict.rejected, why
            return
        api.poison = False  # poisoning is for the correctness trials; timing measures the kernel alone
        self._time(cand, new, ev, req, base + trials)

    def _time(self, cand, new, ev: Evaluation, req: dict, seed: int) -> None:
        reps = int(req.get("reps", 50))
        inputs = self.task.make_inputs(seed, 'cuda')
        fns = {"eager": lambda: self.ref(*inputs), "candidate": lambda: new(*inputs)}
        if (c := self._compiled_ref()) is not None:
            fns["compiled"] = lambda: c(*inputs)
        with torch.no_grad():
            t = time_interleaved(fns, reps=reps, flusher=self.flusher)
            synced = time_interleaved({"candidate": fns["candidate"]}, reps=max(5, reps // 5), warmup=1,
                                      flusher=self.flusher, device_sync=True)["candidate"]
            # the timed inputs change in place: an output cached during timing now goes stale
            fresh = self.task.make_inputs(seed + 1, 'cuda')
            for a, b in zip(inputs, fresh):
                if isinstance(a, torch.Tensor):
                    a.copy_(b)
            ok, detail, *_ = compare(new(*inputs), self.ref(*inputs))
        self._sync()
        ev.timing, ev.eager, ev.compiled = t["candidate"], t["eager"], t.get("compiled")
        if not ok:
            ev.verdict, ev.reason = Verdict.rejected, f"stale output after the inputs changed (output caching): {detail}"[:300]
            return
        ev.verdict = Verdict.correct
        med = ev.timing.median_ms
        ev.speedup_vs_eager = ev.eager.median_ms / med
        if ev.compiled:
            ev.speedup_vs_compile = ev.compiled.median_ms / med
        floor = float(req.get("floor_ms") or 0.0)
        if floor > 0:
            ev.roofline_fraction = floor / med
        if synced.median_ms > med * 1.5 + SIDE_STREAM_SLACK_MS:
            ev.flagged = (f"work escaped the launch stream: {synced.median_ms:.3f} ms device-wide vs "
                          f"{med:.3f} ms on the stream")
        elif floor > 0 and med < floor * FLOOR_SLACK:
            ev.flagged = f"faster than the roofline floor ({med:.4f} ms < {floor:.4f} ms): not believed"


def main(conn) -> None:
    """Entry point of the spawned process."""
    w = Worker()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        kind, payload = msg
        try:
            if kind == "setup":
                reply = {"ok": True, **w.setup(payload)}
            elif kind == "baselines":
                reply = {"ok": True, **w.baselines(payload)}
            elif kind == "evaluate":
                reply = {"ok": True, **w.evaluate(payload)}
            else:
                reply = {"ok": False, "error": f"unknown request {kind!r}"}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "fatal": _is_cuda_fault(exc),
                     "traceback": traceback.format_exc()[-2000:]}
        conn.send(reply)
        if reply.get("fatal"):
            return
        time.sleep(0)
