"""Test doubles: a scripted agent and a scripted evaluator, for running the graph on the CPU."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from agents import Proposal, ProposedKernel, StageRequest
from runtime.evaluator import Baselines
from state import CompileResult, CorrectnessResult, Evaluation, Timing, Verdict

SRC = 'extern "C" __global__ void k(float* y, const float* x, long long n) {}'


def kernel(**params) -> ProposedKernel:
    """`regions=N`: a program of N kernels (k0..kN-1)."""
    n = int(params.get("regions", 1))
    names = ["k"] if n == 1 else [f"k{i}" for i in range(n)]
    return ProposedKernel(cuda_source=SRC, host_code="class ModelNew: pass", kernel_names=names, params=params,
                          description=f"scripted kernel {params}")


class ScriptedAgent:
    """Proposes kernels from a script: {stage: [round1_params_list, round2_params_list, ...]}."""
    name = "scripted"

    def __init__(self, script: dict, log: str | None = None, unsupported: str | None = None):
        self.script, self.log, self.unsupported = script, log, unsupported
        self.requests: list[StageRequest] = []

    def propose(self, req: StageRequest) -> Proposal:
        self.requests.append(req)
        if self.log:
            with open(self.log, "a") as f:
                f.write(json.dumps({"stage": req.stage, "round": req.round, "pid": os.getpid()}) + "\n")
        if self.unsupported:
            return Proposal(unsupported=self.unsupported)
        rounds = self.script.get(req.stage, [])
        params = rounds[req.round - 1] if req.round - 1 < len(rounds) else []
        return Proposal(kernels=[kernel(**p) for p in params], plan=f"plan for {req.stage}")


class ScriptedEvaluator:
    """Verdicts come from each candidate's params: verdict (default correct) and ms.

    `kill_on`: a candidate param value `kill=True` makes the process exit (os._exit) the
    first time, unless `marker` exists; used by the crash-and-resume test."""
    kind = "gpu"

    def __init__(self, log: str | None = None, marker: str | None = None):
        self.log, self.marker = log, marker
        self.lock = threading.Lock()

    def baselines(self, task_path):
        return Baselines(eager=Timing(median_ms=2.0, p10_ms=2.0, p90_ms=2.0, reps=1),
                         compiled=Timing(median_ms=1.5, p10_ms=1.5, p90_ms=1.5, reps=1), device="scripted")

    def _others_done(self, c) -> bool:
        if not self.log or not Path(self.log).exists():
            return False
        return any(json.loads(ln)["candidate"].startswith(c.stage) for ln in Path(self.log).read_text().splitlines())

    def evaluate(self, task_path, candidates, floor_ms):
        out = []
        for c in candidates:
            if c.params.get("kill") and self.marker and not Path(self.marker).exists():
                # fanned-out evaluations run in any order: die only once a sibling has finished (mid-stage)
                deadline = time.time() + 20
                while not self._others_done(c) and time.time() < deadline:
                    time.sleep(0.05)
                time.sleep(1.0)  # let the checkpointer store the evaluations that finished
                Path(self.marker).write_text("killed")
                os._exit(17)
        with self.lock:  # one GPU: evaluations are sequential even when fanned out
            for c in candidates:
                v = Verdict(c.params.get("verdict", "correct"))
                ms = float(c.params.get("ms", 1.0))
                ev = Evaluation(candidate_id=c.id, stage=c.stage, verdict=v,
                                compile=CompileResult(ok=v != Verdict.compile_error, backend="scripted", arch="x"),
                                reason="" if v == Verdict.correct else f"scripted {v.value}")
                if v == Verdict.correct:
                    ev.correctness = CorrectnessResult(passed=True, trials=3)
                    ev.timing = Timing(median_ms=ms, p10_ms=ms, p90_ms=ms, reps=1)
                    ev.speedup_vs_eager, ev.speedup_vs_compile = 2.0 / ms, 1.5 / ms
                    if len(c.kernel_names) > 1:  # a program: its time split over its kernels, the first the heaviest
                        w = [2.0 ** -i for i in range(len(c.kernel_names))]
                        ev.kernel_ms = {k: ms * x / sum(w) for k, x in zip(c.kernel_names, w)}
                if self.log:
                    with open(self.log, "a") as f:
                        f.write(json.dumps({"candidate": c.id, "pid": os.getpid()}) + "\n")
                out.append(ev)
        return out

    def close(self):
        pass


def read_log(path) -> list[dict]:
    p = Path(path)
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


class KillingAgent(ScriptedAgent):
    """Kills its own process (a Ray worker) in `stage` of the task whose path contains `kill_in`,
    the first time only (a marker file remembers)."""

    def __init__(self, script, log, kill_in: str, marker: str, stage: str = "parallel_mapping"):
        super().__init__(script, log=log)
        self.kill_in, self.marker, self.stage = kill_in, marker, stage

    def propose(self, req):
        if req.stage == self.stage and self.kill_in in req.task.path and not Path(self.marker).exists():
            Path(self.marker).write_text("killed")
            os._exit(9)
        return super().propose(req)


def stage_kernels(agent, path, max_candidates: int = 8) -> list[ProposedKernel]:
    """What `agent` proposes at every stage for the task file at `path`, in order, each tuning stage
    starting from the first kernel proposed (for the H200 profile)."""
    from hardware_profiles import load_profile
    from state import STAGES, DesignRecord, KernelCandidate
    from tasks import load_task, task_spec
    spec, prof, best, out = task_spec(load_task(path)), load_profile("h200"), None, []
    for st in STAGES:
        req = StageRequest(stage=st, round=1, task=spec, analysis=None, profile=prof, design=DesignRecord(),
                           attempts=[], best=best, max_candidates=max_candidates)
        ks = agent.propose(req).kernels
        out += ks
        if ks and best is None:
            best = KernelCandidate(id=f"{st}-0", stage=st, **ks[0].model_dump())
    return out


def check_thread_lease(checkpoint: str, thread_id: str) -> None:
    """A lease held by a live process blocks another taker and names its pid; once that process is
    gone, the stale lease is taken over. Works for any checkpoint target (SQLite file, Postgres URL)."""
    import subprocess
    import sys

    import pytest

    from graph.checkpointing import open_checkpointer
    from graph.errors import ThreadBusyError
    from graph.lease import lease
    root = str(Path(__file__).resolve().parent.parent)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from graph.checkpointing import open_checkpointer\nfrom graph.lease import lease\n"
        "with open_checkpointer(%r) as s, lease(s, %r):\n    print('held', flush=True); time.sleep(60)\n")
        % (root, checkpoint, thread_id)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with open_checkpointer(checkpoint) as s:
            with pytest.raises(ThreadBusyError, match=f"pid {holder.pid}"):
                with lease(s, thread_id):
                    pass
    finally:
        holder.kill()
        holder.wait()
    with open_checkpointer(checkpoint) as s:  # its process is gone: the lease is stale and taken over
        with lease(s, thread_id):
            pass
