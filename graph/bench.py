"""`egg bench`: every task under the given paths, each its own checkpointed thread, so an
interrupted bench resumes where it stopped and a finished task is not run again."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

from context import resolve_profile
from graph.runner import get_run, optimize, resume
from runtime.evaluator import make_evaluator
from graph.checkpointing import open_checkpointer
from graph.builder import build
from state import Budget, RunState
from artifacts.bench_report import op_family
from state.bench import BenchResults, TaskResult
from tasks import TaskError, find_task_files


def task_key(path: Path, roots: list[Path]) -> str:
    for r in roots:
        r = r.resolve()
        if r.is_dir() and r in path.parents:
            return str(path.relative_to(r).with_suffix(""))
    return path.stem


def thread_for(key: str) -> str:
    return "bench-" + key.replace("/", "-")


def _status(checkpoint: str | None, tid: str) -> str:
    """'new', 'done' or 'interrupted'."""
    with open_checkpointer(checkpoint) as saver:
        snap = build(saver).get_state({"configurable": {"thread_id": tid}})
    if not snap.values:
        return "new"
    return "interrupted" if snap.next else "done"


def result_of(key: str, tid: str, st: RunState) -> TaskResult:
    r, a = st.result, st.analysis
    best = st.evaluation(st.design.best_id) if st.design.best_id else None
    ok = bool(r and r.status == "verified")
    tr = TaskResult(task=key, thread_id=tid, status=r.status if r else "interrupted",
                    message=(r.message if r else "")[:300], correct=ok,
                    eager_ms=best.eager.median_ms if ok and best.eager else (a.eager_ms if a else None),
                    compile_ms=best.compiled.median_ms if ok and best.compiled else (a.compile_ms if a else None),
                    egg_ms=r.best_ms if ok else None, speedup_vs_eager=r.speedup_vs_eager if ok else None,
                    speedup_vs_compile=r.speedup_vs_compile if ok else None,
                    roofline_fraction=best.roofline_fraction if ok else None,
                    bound=a.roofline.bound if a else None, floor_ms=a.roofline.floor_ms if a else None,
                    guard_policy=best.guard_policy if best else None,
                    family=st.candidate(st.design.best_id).family if st.design.best_id else None,
                    kernel_path=r.kernel_path if r else None)
    tr.stage_best_ms = {d.stage: d.best_ms for d in st.design.decisions}
    if ok and best and best.correctness and (w := best.correctness.worst):
        tr.cand_err, tr.eager_err = w.cand_norm, w.eager_norm
    if ok and st.design.best_id:
        tr.design = st.candidate(st.design.best_id).description or None
        kp = st.kernel_profile(st.design.best_id)
        tr.profile = kp.summary() if kp is not None and kp.available else None
    if ok and best:  # (the evaluator times kernels one by one only for a program of several)
        tr.kernel_ms = dict(best.kernel_ms)
    if ok and best and best.peak_bytes and best.eager_peak_bytes:
        tr.peak_ratio = round(best.peak_bytes / best.eager_peak_bytes, 2)
    if not tr.family and a:
        tr.family = op_family(a.ops)
    return tr


def _commit() -> str:
    if os.environ.get("EGG_COMMIT"):  # a tree copied without .git (a remote GPU machine) says it here
        return os.environ["EGG_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def bench(paths: list[str], *, agent: str = "expert", profile: str | None = None, budget: Budget | None = None,
          out_dir: str = "bench_out", evaluator: str = "auto", checkpoint: str | None = None, timing_reps: int = 50,
          llm=None, tolerance: str = "float64", kernel_profile: bool = True, compile_baseline: bool | str = True,
          agent_obj=None, evaluator_obj=None, stream=sys.stderr) -> BenchResults:
    t0 = time.perf_counter()
    roots = [Path(p) for p in paths]
    files = find_task_files(paths)
    if not files:
        raise TaskError(f"no task files under {', '.join(paths)}")
    out = Path(out_dir)
    checkpoint = checkpoint or str(out / "checkpoints.sqlite")
    results: list[TaskResult] = []
    own = evaluator_obj is None
    if own:  # one evaluation worker for the whole suite: no process start or inductor warm-up per task
        evaluator_obj = make_evaluator(evaluator, resolve_profile(profile).arch, reps=timing_reps, tolerance=tolerance,
                                       compile_baseline=compile_baseline)
    try:
        _run_all(files, roots, out, checkpoint, results, agent, profile, budget, evaluator, timing_reps,
                 llm, agent_obj, evaluator_obj, stream, tolerance, kernel_profile)
    finally:
        if own:
            evaluator_obj.close()
    res = finish(results, out, agent, wall_s=time.perf_counter() - t0, tolerance=tolerance)
    print(f"[bench] [{'#' * 20}] {len(files)}/{len(files)} done, {res.summary.correct} correct in {res.wall_s:.0f} s "
          f"-> {out}/results.md", file=stream, flush=True)
    return res


def run_one(f: Path, key: str, checkpoint: str, out: Path, *, agent, profile, budget, evaluator, timing_reps, llm,
            agent_obj=None, evaluator_obj=None, on_event=None, tolerance: str = "float64",
            kernel_profile: bool = True) -> TaskResult:
    """One task of a bench: skip it if finished, resume it if interrupted, else start it. Never raises."""
    tid = thread_for(key)
    t0 = time.perf_counter()
    try:
        state = _status(checkpoint, tid)
        if state == "done":
            st = get_run(tid, checkpoint)
        elif state == "interrupted":
            st = resume(tid, checkpoint=checkpoint, agent_obj=agent_obj, evaluator_obj=evaluator_obj,
                        on_event=on_event)
        else:
            _, st = optimize(f, agent=agent, profile=profile, budget=budget, out_dir=str(out / "kernels"),
                             evaluator=evaluator, checkpoint=checkpoint, thread_id=tid, agent_obj=agent_obj,
                             evaluator_obj=evaluator_obj, on_event=on_event, timing_reps=timing_reps, llm=llm,
                             tolerance=tolerance, kernel_profile=kernel_profile)
        res = result_of(key, tid, st)
        res.wall_s = None if state == "done" else round(time.perf_counter() - t0, 1)
        res.device = st.analysis.device if st.analysis else None
        return res
    except TaskError as exc:
        return TaskResult(task=key, thread_id=tid, status="error", message=str(exc)[:300])
    except Exception as exc:  # one task's infrastructure failure must not end the suite; resumable later
        return TaskResult(task=key, thread_id=tid, status="error", message=f"{type(exc).__name__}: {exc}"[:300])


def finish(results: list[TaskResult], out: Path, agent: str, wall_s: float | None = None, slots: int = 1,
           final: bool = True, tolerance: str = "float64") -> BenchResults:
    """Write results.json/.md (and, when `final`, the plot: about 0.4 s, too slow to redraw after every task)."""
    from artifacts.bench_report import summarize, write_reports
    device = next((r.device for r in results if r.device and r.device != "cpu"), "cpu")
    res = BenchResults(date=dt.date.today().isoformat(), device=device, commit=_commit(), agent=agent,
                       results=sorted(results, key=lambda r: r.task), summary=summarize(results),
                       wall_s=None if wall_s is None else round(wall_s, 1), slots=slots, tolerance=tolerance)
    write_reports(res, out, with_plot=final)
    return res


def _run_all(files, roots, out, checkpoint, results, agent, profile, budget, evaluator, timing_reps,
             llm, agent_obj, evaluator_obj, stream, tolerance="float64", kernel_profile=True) -> None:
    for i, f in enumerate(files, 1):
        key = task_key(f, roots)
        done = sum(r.correct for r in results)
        bar = "#" * int(20 * (i - 1) / len(files))
        print(f"[bench] [{bar:<20s}] {i - 1}/{len(files)} done, {done} correct | {key}", file=stream, flush=True)

        def on_event(node, update, key=key):
            if node not in ("verify_candidate", "verification"):  # one line per stage, not per candidate
                print(f"[bench]   {key}: {node}", file=stream, flush=True)
        results.append(run_one(f, key, checkpoint, out, agent=agent, profile=profile, budget=budget,
                               evaluator=evaluator, timing_reps=timing_reps, llm=llm, agent_obj=agent_obj,
                               evaluator_obj=evaluator_obj, on_event=on_event, tolerance=tolerance,
                               kernel_profile=kernel_profile))
        print(f"[bench]   {key}: {results[-1].status} {results[-1].message[:100]}", file=stream, flush=True)
        finish(results, out, agent, final=False, tolerance=tolerance)  # after every task, so an interrupted bench still leaves its table
