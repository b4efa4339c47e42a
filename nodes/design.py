"""What every design stage does: ask the agent for candidates for this stage's knobs,
within the budget, and queue them for verification."""
from __future__ import annotations

from langgraph.runtime import Runtime

from agents.base import StageRequest
from graph.context import EggContext
from state import KernelCandidate, RunState


def remaining_budget(state: RunState) -> int:
    b = state.settings.budget
    return max(0, min(b.candidates_per_stage, b.total_candidates - len(state.candidates)))


def design_step(stage: str, state: RunState, runtime: Runtime[EggContext]) -> dict:
    rnd = state.round + 1 if state.stage == stage else 1
    best = state.candidate(state.design.best_id) if state.design.best_id else None
    limit = remaining_budget(state)
    update: dict = {"stage": stage, "round": rnd, "stage_done": False, "pending": []}
    if limit == 0:
        return update  # verification concludes the stage with what it has
    req = StageRequest(stage=stage, round=rnd, task=state.task, analysis=state.analysis,
                       profile=runtime.context.profile, design=state.design,
                       attempts=state.stage_attempts(stage), best=best, max_candidates=limit)
    proposal = runtime.context.agent.propose(req)
    if proposal.unsupported:
        return {**update, "failure": f"unsupported by the {runtime.context.agent.name} agent: {proposal.unsupported}"}
    cands = [KernelCandidate(id=f"{stage}-r{rnd}-c{i}", stage=stage, parent_id=best.id if best else None,
                             **k.model_dump()) for i, k in enumerate(proposal.kernels[:limit])]
    if proposal.plan and stage == "algorithm_design":
        update["design"] = state.design.model_copy(update={"plan": proposal.plan})
    return {**update, "candidates": cands, "pending": [c.id for c in cands]}
