"""Load the task, learn its shapes/FLOPs/bytes, time the baselines, place it on the roofline."""
from __future__ import annotations

import traceback

from langgraph.runtime import Runtime

from context import EggContext, resolve
from runtime.analysis import TaskTooLarge, analyze
from state import RunState, eager_ran_tf32
from tasks import TaskError, load_task, materialize, task_spec


def _where(exc: BaseException, path: str) -> str:
    """file:line of the deepest frame of the task file in the traceback (else the deepest frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename == path]
    if mine:
        return f"{path}:{mine[-1].lineno}"
    return f"{path}: calling it, in {frames[-1].filename}:{frames[-1].lineno}" if frames else path


def analysis(state: RunState, runtime: Runtime[EggContext]) -> dict:
    ctx = resolve(runtime, state.settings)
    try:
        task = load_task(state.settings.task_path)
    except TaskError as exc:
        return {"failure": str(exc), "stage": "analysis"}
    spec = task_spec(task)
    frozen = materialize(spec)  # what every later step loads: the task as it was read here
    known = {"task": spec, "profile": ctx.profile, "stage": "analysis"}
    try:
        result = analyze(task, ctx.profile)
    except TaskTooLarge as exc:
        return {**known, "failure": f"too large: {exc}"}
    except Exception as exc:  # the reference itself is broken: the run ends here, it cannot succeed on resume
        return {**known, "failure": f"the reference raised {type(exc).__name__}: {str(exc)[:200]} "
                                    f"({_where(exc, str(task.path))})"}
    # coverage before baselines: a task the agent cannot cover costs seconds, not a torch.compile
    precheck = getattr(ctx.agent, "precheck", None)
    why = precheck(frozen) if precheck else None
    if why:
        return {**known, "failure": f"unsupported by the {ctx.agent.name} agent: {why}", "analysis": result}
    base = ctx.evaluator.baselines(frozen)
    result.eager_ms = base.eager.median_ms if base.eager else None
    result.compile_ms = base.compiled.median_ms if base.compiled else None
    result.device = base.device
    result.eager_err, result.eager_exact_err = base.eager_err, base.eager_exact_err
    if base.eager_err is not None:
        exact = f", {base.eager_exact_err:.1e} with TF32 off" if base.eager_exact_err is not None else ""
        result.notes.append(f"eager's own error vs float64 {base.eager_err:.1e}{exact} "
                            f"({'TF32-grade' if eager_ran_tf32(base.eager_err, base.eager_exact_err) else 'fp32-grade'})")
    if base.note:
        result.notes.append(base.note)
    return {**known, "analysis": result, "round": 0}
