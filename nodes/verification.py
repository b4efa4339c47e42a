"""Verification: evaluate each pending candidate (fanned out with Send), log the attempt,
then conclude the stage: keep the best, retry, or fail."""
from __future__ import annotations

from langgraph.runtime import Runtime

from context import EggContext, resolve
from tasks import materialize
from state import DesignRecord, Evaluation, RunState, StageAttempt, StageDecision, Verdict, VerifyTask


def conclude(state: RunState, stage_evals: list[Evaluation], compile_only: bool) -> dict:
    """Pick the stage's best, or decide to retry, or fail. Pure: reads state, returns an update."""
    budget = state.settings.budget
    d = state.design
    wins = [e for e in stage_evals if e.ok]
    best = min(wins, key=lambda e: e.timing.median_ms) if wins else None
    used = len(state.candidates)
    out_of_budget = used >= budget.total_candidates
    if state.stage == "algorithm_design":
        unverified = next((e for e in stage_evals if e.verdict == Verdict.compiled_only), None)
        if best is None and compile_only and unverified is not None:
            dec = StageDecision(stage=state.stage, chosen_id=unverified.candidate_id,
                                params=state.candidate(unverified.candidate_id).params,
                                candidates_tried=len(stage_evals), note="compiled only: no GPU to verify on")
            return {"stage_done": True, "design": DesignRecord(decisions=[*d.decisions, dec], best_id=dec.chosen_id,
                                                                best_ms=None, plan=d.plan)}
        if best is None:
            if state.round >= budget.algorithm_rounds or out_of_budget or compile_only:
                why = "no correct kernel" + (" (no GPU: nothing could be verified)" if compile_only else
                                             f" after {state.round} round(s)")
                oom = [e for e in stage_evals if e.verdict == Verdict.out_of_memory]
                if oom and len(oom) == len(stage_evals):
                    why = f"out of memory: the evaluation does not fit: {oom[-1].reason}"
                return {"stage_done": True, "failure": why}
            return {"stage_done": False}
        dec = StageDecision(stage=state.stage, chosen_id=best.candidate_id,
                            params=state.candidate(best.candidate_id).params, best_ms=best.timing.median_ms,
                            improved=True, candidates_tried=len(stage_evals))
        return {"stage_done": True, "design": DesignRecord(decisions=[*d.decisions, dec], best_id=best.candidate_id,
                                                            best_ms=best.timing.median_ms, plan=d.plan)}
    # a tuning stage: more rounds while allowed, then keep the best or the input
    if state.round < budget.tuning_rounds and not out_of_budget and state.pending:
        return {"stage_done": False}
    improved = best is not None and (d.best_ms is None or best.timing.median_ms < d.best_ms)
    chosen = best.candidate_id if improved else d.best_id
    dec = StageDecision(stage=state.stage, chosen_id=chosen,
                        params=state.candidate(chosen).params if chosen else {},
                        best_ms=best.timing.median_ms if improved else d.best_ms, input_ms=d.best_ms,
                        improved=improved, candidates_tried=len(stage_evals),
                        note="" if improved else "kept its input: no candidate beat it")
    return {"stage_done": True, "design": DesignRecord(decisions=[*d.decisions, dec], best_id=chosen,
                                                        best_ms=dec.best_ms, plan=d.plan)}


def verify_candidate(task: VerifyTask, runtime: Runtime[EggContext]) -> dict:
    """One Send per candidate: its evaluation is checkpointed the moment it finishes."""
    path = materialize(task.task) if task.task else task.task_path
    (ev,) = resolve(runtime, task.settings).evaluator.evaluate(path, [task.candidate], task.floor_ms)
    c = task.candidate
    attempt = StageAttempt(stage=c.stage, round=task.round, candidate_id=c.id, params=c.params,
                           verdict=ev.verdict.value, reason=ev.flagged or ev.reason,
                           median_ms=ev.timing.median_ms if ev.timing else None,
                           compile_errors=[f"line {e.line}: {e.message}" if e.line else e.message
                                           for e in (ev.compile.errors if ev.compile else [])][:10])
    return {"evaluations": [ev], "attempts": [attempt]}


PROFILED_KERNELS = 3  # a program's kernels profiled: its heaviest by measured time


def heaviest(evals: list, cand_id: str) -> list[str] | None:
    """The candidate's PROFILED_KERNELS kernels that took the most time when it was timed; None (all of
    them) where it launches no more or was not timed kernel by kernel."""
    ms = next((e.kernel_ms for e in evals if e.candidate_id == cand_id and e.kernel_ms), None)
    if not ms or len(ms) <= PROFILED_KERNELS:
        return None
    return sorted(ms, key=ms.get, reverse=True)[:PROFILED_KERNELS]


def verification(state: RunState, runtime: Runtime[EggContext]) -> dict:
    """The join after the fan-out: conclude the stage from all of its evaluations."""
    if state.failure:
        return {"pending": []}
    stage_evals = [e for e in state.evaluations if e.stage == state.stage]
    ctx = resolve(runtime, state.settings)
    update = conclude(state, stage_evals, compile_only=ctx.evaluator.kind == "compile_only")
    best = update.get("design").best_id if update.get("design") else None
    if best and state.settings.kernel_profile and state.kernel_profile(best) is None and hasattr(ctx.evaluator, "profile"):
        # the stage's best, profiled once: the next stage's agent reads where its time goes
        path = materialize(state.task) if state.task else state.settings.task_path
        update["profiles"] = [ctx.evaluator.profile(path, state.candidate(best), kernels=heaviest(stage_evals, best))]
    return {"pending": [], **update}
