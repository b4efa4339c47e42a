"""Load the task, learn its shapes/FLOPs/bytes, time the baselines, place it on the roofline."""
from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import EggContext, resolve
from runtime.analysis import analyze
from state import RunState
from tasks import TaskError, load_task, task_spec


def analysis(state: RunState, runtime: Runtime[EggContext]) -> dict:
    ctx = resolve(runtime, state.settings)
    try:
        task = load_task(state.settings.task_path)
    except TaskError as exc:
        return {"failure": str(exc), "stage": "analysis"}
    result = analyze(task, ctx.profile)
    base = ctx.evaluator.baselines(str(task.path))
    result.eager_ms = base.eager.median_ms if base.eager else None
    result.compile_ms = base.compiled.median_ms if base.compiled else None
    result.device = base.device
    if base.note:
        result.notes.append(base.note)
    return {"task": task_spec(task), "analysis": result, "stage": "analysis", "round": 0}
