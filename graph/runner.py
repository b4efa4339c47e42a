"""Run, resume and inspect optimizations from Python (the CLI is a thin layer over this)."""
from __future__ import annotations

import sys
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agents import make_agent
from graph.builder import build
from graph.checkpointing import open_checkpointer
from graph.context import EggContext
from hardware_profiles import detect, load_profile
from runtime.evaluator import make_evaluator
from state import Budget, LLMConfig, RunSettings, RunState
from tasks import load_task

DEFAULT_PROFILE = "h200"  # the project's target when no GPU is present to detect


class UnknownThreadError(KeyError):
    def __str__(self) -> str:
        return f"unknown thread {self.args[0]!r} (see `egg runs`)"


@dataclass
class RunSummary:
    thread_id: str
    task: str
    stage: str
    status: str
    best_ms: float | None


def make_context(settings: RunSettings, agent=None, evaluator=None) -> EggContext:
    if settings.profile:
        profile = load_profile(settings.profile)
    else:
        try:
            profile = detect()
        except RuntimeError:
            profile = load_profile(DEFAULT_PROFILE)
    return EggContext(agent=agent or make_agent(settings.agent, settings.llm),
                      evaluator=evaluator or make_evaluator(settings.evaluator, profile.arch,
                                                               reps=settings.timing_reps),
                      profile=profile)


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


def _drive(app, payload, config, ctx: EggContext, on_event, owns_evaluator: bool) -> None:
    try:
        for chunk in app.stream(payload, config, context=ctx, stream_mode="updates", durability="sync"):
            for node, update in chunk.items():
                if on_event and isinstance(update, dict):
                    on_event(node, update)
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
             llm: LLMConfig | None = None, agent_obj=None,
             evaluator_obj=None, on_event: Callable[[str, dict], None] | None = None,
             quiet: bool = False) -> tuple[str, RunState]:
    """Optimize one task file; returns (thread id, final state)."""
    task = load_task(task_path)  # fail fast, with the task's own error, before a thread exists
    if profile:
        load_profile(profile)
    settings = RunSettings(task_path=str(task.path), agent=agent, profile=profile, budget=budget or Budget(),
                           out_dir=str(Path(out_dir).resolve()), evaluator=evaluator,
                           timing_reps=timing_reps, llm=llm or LLMConfig())
    ctx = make_context(settings, agent_obj, evaluator_obj)
    thread_id = thread_id or f"{task.name}-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    with open_checkpointer(checkpoint) as saver:
        app = build(saver)
        if app.get_state(config).values:
            raise ValueError(f"thread {thread_id!r} already exists; use `egg resume {thread_id}`")
        _drive(app, {"settings": settings}, config, ctx, on_event or (None if quiet else _progress_printer()),
               owns_evaluator=evaluator_obj is None)
        return thread_id, _state(app, config)


def resume(thread_id: str, *, checkpoint: str | None = None, agent_obj=None, evaluator_obj=None,
           on_event=None, quiet: bool = False) -> RunState:
    """Continue an interrupted run from its last checkpoint; finished nodes are not run again."""
    config = {"configurable": {"thread_id": thread_id}}
    with open_checkpointer(checkpoint, must_exist=True) as saver:
        app = build(saver)
        st = _state(app, config)
        if st is None:
            raise UnknownThreadError(thread_id)
        if not app.get_state(config).next:
            return st  # finished already
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = make_context(st.settings, agent_obj, evaluator_obj)
        _drive(app, None, config, ctx, on_event or (None if quiet else _progress_printer()),
               owns_evaluator=evaluator_obj is None)
        return _state(app, config)


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
            status = st.result.status if st.result else ("failed" if st.failure else "interrupted")
            out.append(RunSummary(tid, Path(st.settings.task_path).stem, st.stage, status, st.design.best_ms))
        return out
