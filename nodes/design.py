"""What every design stage does: ask the agent for candidates for this stage's knobs,
within the budget, optionally pause for a reviewer, and queue them for verification."""
from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agents.protocol import StageRequest
from context import EggContext, resolve
from state import STAGE_TABLE, KernelCandidate, ReviewDecision, RunState


def guard_policy(run: str, wish: str) -> str:
    """The run's setting decides; under "auto" the agent's wish stands (the worker never trusts a string)."""
    return wish if run == "auto" else run


def remaining_budget(state: RunState) -> int:
    b = state.settings.budget
    return max(0, min(b.candidates_per_stage, b.total_candidates - len(state.candidates)))


def _review(stage: str, rnd: int, proposal) -> ReviewDecision:
    """Pause the run (a LangGraph interrupt, checkpointed: it survives a restart) and return the answer."""
    answer = interrupt({"stage": stage, "round": rnd, "plan": proposal.plan,
                        "candidates": [{"params": k.params, "description": k.description} for k in proposal.kernels],
                        "answer": 'approve | skip | {"action": "edit", "params": [{knob: value, ...}, ...]}'})
    return ReviewDecision.model_validate(answer)


def design_step(stage: str, state: RunState, runtime: Runtime[EggContext]) -> dict:
    ctx = resolve(runtime, state.settings)
    rnd = state.round + 1 if state.stage == stage else 1
    best = state.candidate(state.design.best_id) if state.design.best_id else None
    limit = remaining_budget(state)
    update: dict = {"stage": stage, "round": rnd, "stage_done": False, "pending": []}
    if limit == 0:
        return update  # verification concludes the stage with what it has
    req = StageRequest(stage=stage, round=rnd, task=state.task, analysis=state.analysis, profile=state.profile or ctx.profile,
                       design=state.design, attempts=state.stage_attempts(stage), best=best, max_candidates=limit,
                       best_profile=state.kernel_profile(best.id if best else None),
                       best_kernel_ms=(ev.kernel_ms if best and (ev := state.evaluation(best.id)) else {}))
    proposal = ctx.agent.propose(req)
    if proposal.error:
        return {**update, "failure": proposal.error}
    if proposal.unsupported:
        return {**update, "failure": f"unsupported by the {ctx.agent.name} agent: {proposal.unsupported}"}
    if state.settings.review:
        decision = _review(stage, rnd, proposal)
        if decision.action == "skip":
            if stage == "algorithm_design":
                return {**update, "failure": "the reviewer skipped algorithm design: no kernel to tune"}
            return update  # no candidates: verification keeps the stage's input
        if decision.action == "edit":
            proposal = ctx.agent.propose(req.model_copy(update={"params_override": decision.params}))
    cands = [KernelCandidate(id=f"{stage}-r{rnd}-c{i}", stage=stage, parent_id=best.id if best else None,
                             **{**k.model_dump(), "guard_policy": guard_policy(state.settings.guard_policy, k.guard_policy)})
             for i, k in enumerate(proposal.kernels[:limit])]
    if proposal.plan and stage == "algorithm_design":
        update["design"] = state.design.model_copy(update={"plan": proposal.plan})
    return {**update, "candidates": cands, "pending": [c.id for c in cands]}


def design_node(stage: str):
    """The node function of one design stage (all four share design_step; the table in state names them)."""
    def node(state: RunState, runtime: Runtime[EggContext]) -> dict:
        return design_step(stage, state, runtime)
    node.__name__ = node.__qualname__ = stage
    node.__doc__ = f"{stage}: {STAGE_TABLE[stage]}."
    return node
