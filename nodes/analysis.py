"""Load the task, learn its shapes/FLOPs/bytes, time the baselines, place it on the roofline."""
from __future__ import annotations

import traceback

from langgraph.runtime import Runtime

from graph.context import EggContext, resolve
from runtime.analysis import analyze
from state import RunState
from tasks import TaskError, load_task, task_spec


def _where(exc: BaseException, path: str) -> str:
    """file:line of the deepest frame of the task file in the traceback (else the deepest frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == path] or frames[-1:]
    return f"{mine[-1].filename}:{mine[-1].lineno}" if mine else path


def analysis(state: RunState, runtime: Runtime[EggContext]) -> dict:
    ctx = resolve(runtime, state.settings)
    try:
        task = load_task(state.settings.task_path)
    except TaskError as exc:
        return {"failure": str(exc), "stage": "analysis"}
    try:
        result = analyze(task, ctx.profile)
    except Exception as exc:  # the reference itself is broken: the run ends here, it cannot succeed on resume
        return {"failure": f"the reference raised {type(exc).__name__}: {str(exc)[:200]} ({_where(exc, str(task.path))})",
                "task": task_spec(task), "stage": "analysis"}
    # coverage before baselines: a task the agent cannot cover costs seconds, not a torch.compile
    precheck = getattr(ctx.agent, "precheck", None)
    why = precheck(str(task.path)) if precheck else None
    if why:
        return {"failure": f"unsupported by the {ctx.agent.name} agent: {why}", "task": task_spec(task),
                "analysis": result, "stage": "analysis"}
    base = ctx.evaluator.baselines(str(task.path))
    result.eager_ms = base.eager.median_ms if base.eager else None
    result.compile_ms = base.compiled.median_ms if base.compiled else None
    result.device = base.device
    if base.note:
        result.notes.append(base.note)
    return {"task": task_spec(task), "analysis": result, "stage": "analysis", "round": 0}
