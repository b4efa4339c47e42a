"""Run, resume and inspect optimizations from Python (the CLI is a thin layer over this)."""
from __future__ import annotations

import sys
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from graph.builder import build
from graph.checkpointing import open_checkpointer
from graph.errors import UnknownThreadError
from graph.lease import lease
from context import EggContext, build_context
from hardware_profiles import detect, load_profile
from artifacts import export_run
from langgraph.types import Command
from state import STAGES, Budget, LLMConfig, ReviewDecision, RunSettings, RunState
from tasks import file_sha256, load_task

@dataclass
class RunSummary:
    thread_id: str
    task: str
    stage: str
    status: str
    best_ms: float | None


def _progress_printer(stream=sys.stderr) -> Callable[[str, dict], None]:
    def show(node: str, update: dict) -> None:
        bits = []
        if node in ("verify_candidate",):
            for ev in update.get("evaluations", []):
                t = f" {ev.timing.median_ms:.4f} ms" if ev.timing else ""
                bits.append(f"{ev.candidate_id}: {ev.verdict.value}{t} {ev.flagged or ev.reason}"[:150])
        elif update.get("candidates"):
            bits.append(f"{len(update['candidates'])} candidate(s)")
        if update.get("failure"):
            bits.append(update["failure"])
        if r := update.get("result"):
            bits.append(f"{r.status}: {r.message}")
        print(f"[egg] {node}: {'; '.join(bits)}".rstrip(": "), file=stream, flush=True)
    return show


def pending_review(app, config) -> dict | None:
    """The payload of the review pause the run is waiting at, if any."""
    snap = app.get_state(config)
    for t in snap.tasks:
        for i in t.interrupts:
            return i.value
    return None


def pause_of(thread_id: str, checkpoint: str | None = None) -> dict | None:
    """The review pause a thread waits at (stage, round, plan), if any."""
    with open_checkpointer(checkpoint, must_exist=True) as saver:
        return pending_review(build(saver), {"configurable": {"thread_id": thread_id}})


def _answer(decision) -> Command:
    """A reviewer's decision as the Command that resumes the paused stage."""
    return Command(resume=ReviewDecision.model_validate(decision).model_dump())


def _drive(app, payload, config, ctx: EggContext, on_event, owns_evaluator: bool, reviewer=None) -> None:
    """Stream the graph; at a review pause ask `reviewer(payload) -> decision`, or stop there (paused)."""
    try:
        while True:
            for chunk in app.stream(payload, config, context=ctx, stream_mode="updates", durability="sync"):
                for node, update in chunk.items():
                    if on_event and isinstance(update, dict):
                        on_event(node, update)
            pause = pending_review(app, config)
            if pause is None or reviewer is None:
                return
            payload = _answer(reviewer(pause))
    finally:
        if owns_evaluator:  # a caller's evaluator (a bench's shared worker) stays open
            ctx.evaluator.close()


def _state(app, config) -> RunState | None:
    snap = app.get_state(config)
    if not snap.values:
        return None
    return RunState.model_validate(snap.values)


def optimize(task_path: str | Path, *, agent: str = "expert", profile: str | None = None,
             budget: Budget | None = None, out_dir: str = "egg_out", evaluator: str = "auto",
             checkpoint: str | None = None, thread_id: str | None = None, timing_reps: int = 50,
             llm: LLMConfig | None = None, review: bool = False, reviewer=None, agent_obj=None,
             tolerance: str = "float64", kernel_profile: bool = True,
             evaluator_obj=None, on_event: Callable[[str, dict], None] | None = None,
             quiet: bool = False) -> tuple[str, RunState]:
    """Optimize one task file; returns (thread id, final state)."""
    task = load_task(task_path)  # fail fast, with the task's own error, before a thread exists
    if profile:
        load_profile(profile)
    settings = RunSettings(task_path=str(task.path), agent=agent, profile=profile, budget=budget or Budget(),
                           out_dir=str(Path(out_dir).resolve()), evaluator=evaluator,
                           timing_reps=timing_reps, llm=llm or LLMConfig(), review=review, tolerance=tolerance,
                           kernel_profile=kernel_profile)
    ctx = build_context(settings, agent_obj, evaluator_obj)
    thread_id = thread_id or f"{task.name}-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    with open_checkpointer(checkpoint) as saver:
        app = build(saver)
        if app.get_state(config).values:
            raise ValueError(f"thread {thread_id!r} already exists; use `egg resume {thread_id}`")
        with lease(saver, thread_id):
            _drive(app, {"settings": settings}, config, ctx, on_event or (None if quiet else _progress_printer()),
                   owns_evaluator=evaluator_obj is None, reviewer=reviewer)
        return thread_id, _state(app, config)


def _check_resumable(thread_id: str, st: RunState, force: bool, stream=sys.stderr) -> None:
    """The task file must be the one the run read (else --force: go on with the stored copy); a
    different live GPU is reported, and the stored profile kept."""
    if st.task and st.task.source:
        now = file_sha256(st.settings.task_path)
        if now is not None and now != st.task.source_sha256:
            if not force:
                raise ValueError(f"{st.settings.task_path} changed since thread {thread_id!r} started (sha256 "
                                 f"{st.task.source_sha256[:12]} then, {now[:12]} now): `egg resume {thread_id} --force` "
                                 "goes on with the copy the run stored, or start a new run")
            print(f"[egg] {st.settings.task_path} changed since the run started: going on with the stored copy",
                  file=stream)
    if st.profile is not None:
        try:
            live = detect()
        except RuntimeError:
            return
        if live.name != st.profile.name:
            print(f"[egg] the run started with the {st.profile.name} profile; the live GPU is {live.name}: "
                  f"keeping {st.profile.name} (its roofline)", file=stream)


def resume(thread_id: str, *, checkpoint: str | None = None, decision: dict | str | None = None, reviewer=None,
           agent_obj=None, evaluator_obj=None, on_event=None, quiet: bool = False, force: bool = False) -> RunState:
    """Continue an interrupted run from its last checkpoint; finished nodes are not run again.
    A run paused for review needs `decision` (approve / skip / edit) or a `reviewer` callback."""
    config = {"configurable": {"thread_id": thread_id}}
    with open_checkpointer(checkpoint, must_exist=True) as saver:
        app = build(saver)
        st = _state(app, config)
        if st is None:
            raise UnknownThreadError(thread_id)
        if not app.get_state(config).next:
            if decision is not None:
                raise ValueError(f"thread {thread_id!r} has finished "
                                 f"({st.result.status if st.result else st.failure or 'done'}): no review to answer")
            return st  # finished already
        _check_resumable(thread_id, st, force)
        payload = None
        pause = pending_review(app, config)
        if pause is not None:
            if decision is None and reviewer is None:
                raise ValueError(f"thread {thread_id!r} is paused for review: answer with --approve, --skip or --edit")
            payload = _answer(decision if decision is not None else reviewer(pause))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = build_context(st.settings, agent_obj, evaluator_obj, profile=st.profile)
        with lease(saver, thread_id):
            _drive(app, payload, config, ctx, on_event or (None if quiet else _progress_printer()),
                   owns_evaluator=evaluator_obj is None, reviewer=reviewer)
        return _state(app, config)


def fork(thread_id: str, stage: str, *, checkpoint: str | None = None, new_thread: str | None = None,
         agent: str | None = None, budget: Budget | None = None, review: bool | None = None) -> str:
    """Time travel: a new thread that starts from the checkpoint just before `stage` first ran in
    `thread_id`, optionally with other settings. The original thread is left as it was."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (stages: {', '.join(STAGES)})")
    config = {"configurable": {"thread_id": thread_id}}
    with open_checkpointer(checkpoint, must_exist=True) as saver:
        app = build(saver)
        history = list(app.get_state_history(config))
        if not history:
            raise UnknownThreadError(thread_id)
        before = [h for h in history if stage in h.next]
        if not before:
            raise ValueError(f"thread {thread_id!r} never reached {stage}")
        snap = before[-1]  # the oldest: the stage's first round
        st = RunState.model_validate(snap.values)
        changes: dict = {"forked_from": f"{thread_id}@{stage}"}
        if agent:
            changes["agent"] = agent
        if budget:
            changes["budget"] = budget
        if review is not None:
            changes["review"] = review
        st.settings = st.settings.model_copy(update=changes)
        new_thread = new_thread or f"{thread_id}-fork-{stage}-{uuid.uuid4().hex[:4]}"
        new_cfg = {"configurable": {"thread_id": new_thread}}
        if app.get_state(new_cfg).values:
            raise ValueError(f"thread {new_thread!r} already exists")
        as_node = "verification" if stage != "algorithm_design" else "analysis"
        app.update_state(new_cfg, {k: getattr(st, k) for k in RunState.model_fields}, as_node=as_node)
        if stage not in app.get_state(new_cfg).next:
            raise RuntimeError(f"the fork does not continue at {stage}")
        return new_thread


def export(thread_id: str, out_dir: str | Path, checkpoint: str | None = None) -> dict[str, str]:
    """Write the run's best kernel (.cu), a standalone ModelNew module and the report."""
    st = get_run(thread_id, checkpoint)
    if not st.design.best_id:
        raise ValueError(f"thread {thread_id!r} has no kernel to export ({st.failure or 'not finished'})")
    return export_run(st, out_dir)


def get_run(thread_id: str, checkpoint: str | None = None) -> RunState:
    with open_checkpointer(checkpoint, must_exist=True) as saver:
        st = _state(build(saver), {"configurable": {"thread_id": thread_id}})
    if st is None:
        raise UnknownThreadError(thread_id)
    return st


def list_runs(checkpoint: str | None = None) -> list[RunSummary]:
    with open_checkpointer(checkpoint, must_exist=True) as saver:
        app = build(saver)
        threads: list[str] = []
        for cp in saver.list(None):
            tid = cp.config["configurable"]["thread_id"]
            if tid not in threads:
                threads.append(tid)
        out = []
        for tid in threads:
            st = _state(app, {"configurable": {"thread_id": tid}})
            if st is None:
                continue
            status = st.result.status if st.result else ("failed" if st.failure else
                                                         "paused" if pending_review(app, {"configurable": {"thread_id": tid}})
                                                         else "interrupted")
            out.append(RunSummary(tid, Path(st.settings.task_path).stem, st.stage, status, st.design.best_ms))
        return out
