"""`egg bench --ray [ADDRESS]`: tasks fanned out over a Ray cluster, one task at a time per GPU
(Ray's GPU resources; a CPU slot each where the cluster has none), every thread in one shared
checkpointer. A worker that dies takes its task with it; Ray runs the task again elsewhere and
it resumes from its last checkpoint, so no finished node or evaluation is lost or repeated."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from graph.bench import finish, run_one, task_key
from state import Budget
from state.bench import BenchResults, TaskResult
from tasks import TaskError, find_task_files

TASK_RETRIES = 3  # a task whose worker died is run again (and resumes) up to this many times


def _remote_task(path: str, key: str, checkpoint: str, out: str, kw: dict, agent_factory, evaluator_factory) -> dict:
    """Runs on a Ray worker: build this worker's agent/evaluator (nothing unpicklable crosses), run one task."""
    agent_obj = agent_factory() if agent_factory else None
    evaluator_obj = evaluator_factory() if evaluator_factory else None
    try:
        res = run_one(Path(path), key, checkpoint, Path(out), agent_obj=agent_obj, evaluator_obj=evaluator_obj, **kw)
    finally:
        if evaluator_obj is not None:
            evaluator_obj.close()
    res.host = socket.gethostname()
    return res.model_dump(mode="json")


def bench_ray(paths: list[str], *, address: str | None = None, agent: str = "expert", profile: str | None = None,
              budget: Budget | None = None, out_dir: str = "bench_out", evaluator: str = "auto",
              checkpoint: str | None = None, timing_reps: int = 50, llm=None, agent_factory=None,
              evaluator_factory=None, ray_init: dict | None = None, stream=sys.stderr) -> BenchResults:
    import ray

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
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": root}}, **(ray_init or {}))
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        slot = {"num_gpus": 1} if gpus else {"num_cpus": 1}
        task = ray.remote(max_retries=TASK_RETRIES, retry_exceptions=False)(_remote_task).options(**slot)
        kw = dict(agent=agent, profile=profile, budget=budget, evaluator=evaluator, timing_reps=timing_reps, llm=llm)
        roots = [Path(p) for p in paths]
        pending = {task.remote(str(f), task_key(f, roots), checkpoint, str(out), kw, agent_factory,
                               evaluator_factory): task_key(f, roots) for f in files}
        print(f"[bench] ray: {len(files)} tasks over {gpus or int(ray.cluster_resources().get('CPU', 1))} "
              f"{'GPU' if gpus else 'CPU'} slot(s)", file=stream, flush=True)
        results: list[TaskResult] = []
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            key = pending.pop(ready[0])
            try:
                results.append(TaskResult.model_validate(ray.get(ready[0])))
            except Exception as exc:  # retries exhausted: the task is still accounted for
                results.append(TaskResult(task=key, thread_id=f"bench-{key.replace('/', '-')}", status="error",
                                          message=f"worker lost after {TASK_RETRIES} retries: {type(exc).__name__}"))
            print(f"[bench] {len(results)}/{len(files)} done | {key}: {results[-1].status}", file=stream, flush=True)
            finish(results, out, agent)
        return finish(results, out, agent)
    finally:
        if started_here:
            ray.shutdown()
