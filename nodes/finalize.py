"""Write the best kernel, its ModelNew module and the report; set the run's result."""
from __future__ import annotations

from pathlib import Path

from langgraph.runtime import Runtime

from artifacts import export_run
from context import EggContext
from state import FinalResult, RunState


def _result(state: RunState) -> FinalResult:
    d = state.design
    if state.failure:
        status = "unsupported" if state.failure.startswith("unsupported") else "failed"
        return FinalResult(status=status, message=state.failure)
    ev = state.evaluation(d.best_id) if d.best_id else None
    if ev is None or not ev.ok:
        return FinalResult(status="unverified", best_id=d.best_id,
                           message="the kernel compiled but was not verified (no CUDA device)")
    # speedups from the evaluation itself: baselines timed right after the kernel, in the baseline worker
    a = state.analysis
    return FinalResult(status="verified", best_id=d.best_id, best_ms=ev.timing.median_ms,
                       speedup_vs_eager=ev.speedup_vs_eager, speedup_vs_compile=ev.speedup_vs_compile,
                       message=f"verified on {a.device if a else 'the GPU'}")


def finalize(state: RunState, runtime: Runtime[EggContext]) -> dict:
    result = _result(state)
    name = state.task.name if state.task else Path(state.settings.task_path).stem
    paths = export_run(state.model_copy(update={"result": result}), Path(state.settings.out_dir) / name)
    return {"result": result.model_copy(update=paths), "stage": "done"}
