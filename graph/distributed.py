"""`egg bench --ray [ADDRESS]`: tasks fanned out over a Ray cluster, every thread in one shared
checkpointer.

One Ray actor per GPU (Ray's GPU resources; one per CPU slot where the cluster has none) holds
its agent and evaluation worker for the whole suite, so a task pays no process start, CUDA
init or inductor warm-up, just as in the one-process bench. Each actor takes the next task
when it finishes one. An actor that dies takes its task with it: Ray restarts the actor and
retries the call, and the task resumes from its last checkpoint, so no finished node or
evaluation is lost or repeated."""
from __future__ import annotations

import os
import socket
import sys
import time
from collections import deque
from pathlib import Path

from graph.bench import finish, run_one, task_key, thread_for
from state import Budget
from state.bench import BenchResults, TaskResult
from tasks import TaskError, find_task_files

TASK_RETRIES = 3  # an actor that died is restarted, and its task retried (and resumed), up to this many times


class BenchSlot:
    """One GPU's worker (a Ray actor): its agent and evaluator live as long as it does."""

    def __init__(self, checkpoint: str, out: str, kw: dict, agent_factory=None, evaluator_factory=None):
        from context import resolve_profile
        from runtime.evaluator import make_evaluator
        self.checkpoint, self.out, self.kw = checkpoint, Path(out), kw
        self.agent = agent_factory() if agent_factory else None
        self.evaluator = (evaluator_factory() if evaluator_factory else
                          make_evaluator(kw["evaluator"], resolve_profile(kw["profile"]).arch, reps=kw["timing_reps"],
                                         tolerance=kw.get("tolerance", "float64")))
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")  # Ray sets it to this actor's GPU
        self.name = f"{socket.gethostname()}:{'gpu' + gpus if gpus else 'cpu'}:{os.getpid()}"

    def run(self, path: str, key: str) -> dict:
        res = run_one(Path(path), key, self.checkpoint, self.out, agent_obj=self.agent,
                      evaluator_obj=self.evaluator, **self.kw)
        res.host = self.name
        return res.model_dump(mode="json")

    def close(self) -> None:
        self.evaluator.close()


def _lost(key: str, exc: Exception) -> TaskResult:
    """A task whose actor died more often than Ray retries: still accounted for, resumable later."""
    return TaskResult(task=key, thread_id=thread_for(key), status="error",
                      message=f"worker lost after {TASK_RETRIES} retries: {type(exc).__name__}")


def bench_ray(paths: list[str], *, address: str | None = None, agent: str = "expert", profile: str | None = None,
              budget: Budget | None = None, out_dir: str = "bench_out", evaluator: str = "auto",
              checkpoint: str | None = None, timing_reps: int = 50, llm=None, tolerance: str = "float64",
              kernel_profile: bool = True, agent_factory=None,
              evaluator_factory=None, ray_init: dict | None = None, stream=sys.stderr) -> BenchResults:
    import ray

    t0 = time.perf_counter()
    roots = [Path(p) for p in paths]
    files = find_task_files(paths)
    if not files:
        raise TaskError(f"no task files under {', '.join(paths)}")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = checkpoint or str(out / "checkpoints.sqlite")
    if not checkpoint.startswith(("postgresql://", "postgres://")):
        checkpoint = str(Path(checkpoint).resolve())
        if address:
            print("[bench] warning: a SQLite checkpoint is only shared by workers on this host; use "
                  "--checkpoint postgresql://... for a multi-host cluster", file=stream)
    root = str(Path(__file__).resolve().parent.parent)
    # workers import this project and whatever the driver could import (a wheel folder on PYTHONPATH)
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **(ray_init or {}))
    slots = []
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        n = min(len(files), gpus or int(ray.cluster_resources().get("CPU", 1)))
        kw = dict(agent=agent, profile=profile, budget=budget, evaluator=evaluator, timing_reps=timing_reps, llm=llm,
                  tolerance=tolerance, kernel_profile=kernel_profile)
        actor = ray.remote(max_restarts=TASK_RETRIES, max_task_retries=TASK_RETRIES)(BenchSlot).options(
            **({"num_gpus": 1} if gpus else {"num_cpus": 1}))
        slots = [actor.remote(checkpoint, str(out), kw, agent_factory, evaluator_factory) for _ in range(n)]
        print(f"[bench] ray: {len(files)} tasks over {n} {'GPU' if gpus else 'CPU'} slot(s)", file=stream, flush=True)
        queue = deque((str(f), task_key(f, roots)) for f in files)
        running: dict = {}  # object ref -> (slot, key)

        def feed(slot) -> None:
            if queue:
                path, key = queue.popleft()
                running[slot.run.remote(path, key)] = (slot, key)
        for s in slots:
            feed(s)
        results: list[TaskResult] = []
        while running:
            ready, _ = ray.wait(list(running), num_returns=1)
            slot, key = running.pop(ready[0])
            try:
                results.append(TaskResult.model_validate(ray.get(ready[0])))
                feed(slot)
            except ray.exceptions.RayActorError as exc:  # gone for good: account for its task, feed the others
                results.append(_lost(key, exc))
                slots.remove(slot)
                if not slots:  # no actor left: the rest are lost too (a rerun resumes them)
                    results += [_lost(k, exc) for _, k in queue]
                    queue.clear()
            except Exception as exc:  # the call failed but the actor lives on
                results.append(TaskResult(task=key, thread_id=thread_for(key), status="error",
                                          message=f"{type(exc).__name__}: {exc}"[:300]))
                feed(slot)
            r = results[-1]
            print(f"[bench] {len(results)}/{len(files)} done | {key}: {r.status} on {r.host or '-'}",
                  file=stream, flush=True)
            finish(results, out, agent, final=False, tolerance=tolerance)
        res = finish(results, out, agent, wall_s=time.perf_counter() - t0, slots=n, tolerance=tolerance)
        print(f"[bench] {len(files)} tasks in {res.wall_s:.0f} s over {n} slot(s) -> {out}/results.md",
              file=stream, flush=True)
        return res
    finally:
        for s in slots:
            try:
                ray.get(s.close.remote(), timeout=60)
            except Exception:
                pass
        if started_here:
            ray.shutdown()
