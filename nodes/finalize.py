"""Write the best kernel, its ModelNew module and the report; set the run's result."""
from __future__ import annotations

import os
from pathlib import Path

from langgraph.config import get_config

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


def out_folder(settings, name: str, thread_id: str | None) -> Path:
    """One folder per thread (two runs of a task never overwrite each other), and `latest` beside them.
    A relative out_dir with no runner to resolve it (Studio, `langgraph dev`) goes under the user's cache,
    outside the project the server watches: a write there would reload the server and cancel runs."""
    base = Path(settings.out_dir)
    if not base.is_absolute():
        base = Path(os.environ.get("EGG_OUT_DIR") or Path.home() / ".cache" / "egg" / "out") / base
    return base / name / (thread_id or "run")


def _point_latest(folder: Path) -> None:
    link = folder.parent / "latest"
    try:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(folder.name, target_is_directory=True)
    except OSError:  # no symlinks here: a file naming the folder
        (folder.parent / "LATEST").write_text(folder.name + "\n")


def finalize(state: RunState, runtime: Runtime[EggContext]) -> dict:
    result = _result(state)
    name = state.task.name if state.task else Path(state.settings.task_path).stem
    thread_id = (get_config().get("configurable") or {}).get("thread_id")
    folder = out_folder(state.settings, name, thread_id)
    paths = export_run(state.model_copy(update={"result": result}), folder)
    _point_latest(folder)
    return {"result": result.model_copy(update=paths), "stage": "done"}
