"""The graph end to end on the CPU with a scripted agent and evaluator."""
import warnings

from graph.runner import get_run, list_runs, optimize, resume
from state import Budget, KernelCandidate, RunState
from tests.support import ScriptedAgent, ScriptedEvaluator

SCRIPT = {
    "algorithm_design": [[{"verdict": "compile_error"}], [{"verdict": "incorrect"}, {"ms": 1.0}]],
    "parallel_mapping": [[{"block": 128, "ms": 0.8}, {"block": 256, "ms": 0.6}, {"block": 512, "verdict": "crashed"}]],
    "tiling": [[{"items": 4, "ms": 0.9}]],  # slower than its input: the stage must keep the input
    "memory_optimization": [[{"vec": 4, "ms": 0.5}]],
}


def run(tmp_egg, relu_task, script=SCRIPT, budget=None, **kw):
    agent = ScriptedAgent(script)
    tid, st = optimize(relu_task, agent="expert", agent_obj=agent, evaluator_obj=ScriptedEvaluator(),
                       checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"), profile="h200",
                       budget=budget or Budget(), quiet=True, **kw)
    return tid, st, agent


def test_stages_retry_keep_best_and_keep_input(tmp_egg, relu_task):
    tid, st, agent = run(tmp_egg, relu_task)
    assert isinstance(st, RunState)
    assert [(r.stage, r.round) for r in agent.requests] == [
        ("algorithm_design", 1), ("algorithm_design", 2), ("parallel_mapping", 1), ("tiling", 1),
        ("memory_optimization", 1)]
    dec = {d.stage: d for d in st.design.decisions}
    assert dec["algorithm_design"].best_ms == 1.0
    assert dec["parallel_mapping"].params == {"block": 256, "ms": 0.6} and dec["parallel_mapping"].improved
    assert not dec["tiling"].improved and dec["tiling"].chosen_id == dec["parallel_mapping"].chosen_id
    assert dec["memory_optimization"].best_ms == 0.5
    assert st.result.status == "verified" and st.result.best_ms == 0.5
    assert st.candidate(st.design.best_id).parent_id == dec["parallel_mapping"].chosen_id
    # the second algorithm round saw the first round's compile error in its intra-stage log
    second = agent.requests[1]
    assert [a.verdict for a in second.attempts] == ["compile_error"]
    # tuning stages got the inter-stage record and the best kernel so far
    assert agent.requests[3].best.id == dec["parallel_mapping"].chosen_id
    assert [d.stage for d in agent.requests[3].design.decisions] == ["algorithm_design", "parallel_mapping"]
    assert {a.candidate_id for a in st.attempts} == {c.id for c in st.candidates}


def test_algorithm_design_fails_after_bounded_rounds(tmp_egg, relu_task):
    script = {"algorithm_design": [[{"verdict": "incorrect"}]] * 5}
    _, st, agent = run(tmp_egg, relu_task, script, Budget(algorithm_rounds=2))
    assert len(agent.requests) == 2
    assert st.result.status == "failed" and "no correct kernel after 2 round" in st.result.message


def test_budget_caps_candidates(tmp_egg, relu_task):
    script = {s: [[{"ms": 1.0 - 0.01 * i} for i in range(6)]] for s in SCRIPT}
    _, st, _ = run(tmp_egg, relu_task, script, Budget(candidates_per_stage=3, total_candidates=7))
    per_stage = {}
    for c in st.candidates:
        per_stage[c.stage] = per_stage.get(c.stage, 0) + 1
    assert per_stage == {"algorithm_design": 3, "parallel_mapping": 3, "tiling": 1}
    assert len(st.candidates) == 7 and st.result.status == "verified"


def test_unsupported_task_ends_clearly(tmp_egg, relu_task):
    agent = ScriptedAgent({}, unsupported="aten::_fft_r2c")
    _, st = optimize(relu_task, agent_obj=agent, evaluator_obj=ScriptedEvaluator(), quiet=True,
                     checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"), profile="h200")
    assert st.result.status == "unsupported" and "aten::_fft_r2c" in st.result.message


def test_state_comes_back_as_pydantic_without_warnings(tmp_egg, relu_task):
    tid, _, _ = run(tmp_egg, relu_task)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st = get_run(tid, str(tmp_egg / "cp.sqlite"))
    assert isinstance(st.candidates[0], KernelCandidate)
    assert type(st.evaluations[0]).__name__ == "Evaluation" and st.evaluations[0].verdict.value == "compile_error"
    assert [r.thread_id for r in list_runs(str(tmp_egg / "cp.sqlite"))] == [tid]
    # resuming a finished run changes nothing
    again = resume(tid, checkpoint=str(tmp_egg / "cp.sqlite"), agent_obj=ScriptedAgent({}),
                   evaluator_obj=ScriptedEvaluator(), quiet=True)
    assert len(again.candidates) == len(st.candidates)


def test_artifacts_written(tmp_egg, relu_task):
    _, st, _ = run(tmp_egg, relu_task)
    r = st.result
    assert open(r.kernel_path).read() == st.candidate(st.design.best_id).cuda_source
    module = open(r.module_path).read()
    assert "class ModelNew" in module and "CUDA_SRC" in module and "class KernelAPI" in module
    report = open(r.report_path).read()
    assert "| parallel_mapping |" in report and "kept its input" in report


def test_a_programs_time_per_kernel_reaches_the_report_and_history(tmp_egg, relu_task, capsys):
    """Issue 19: where a program's time goes, kernel by kernel (the evaluator measures it on the GPU),
    is in the best candidate's record, `egg history` and the report."""
    from graph.cli import main
    script = {"algorithm_design": [[{"regions": 3, "ms": 1.4}]]}
    tid, st, agent = run(tmp_egg, relu_task, script=script)
    ev = st.evaluation(st.design.best_id)
    assert list(ev.kernel_ms) == ["k0", "k1", "k2"] and abs(sum(ev.kernel_ms.values()) - 1.4) < 1e-9
    # the next stages are told where the best's time went (the expert tunes a slow region; the LLM reads it)
    later = [r for r in agent.requests if r.stage != "algorithm_design"]
    assert later and all(r.best_kernel_ms == ev.kernel_ms for r in later)
    from agents.llm.prompts import context_sections, render
    assert "k1 0.400 ms" in render(context_sections(later[0], "class Model: pass"))
    report = open(st.result.report_path).read()
    assert "Where the time goes" in report and "| k0 | 0.8000 | 57% |" in report
    main(["--checkpoint", str(tmp_egg / "cp.sqlite"), "history", tid])
    assert "kernels: k0 0.800 ms, k1 0.400 ms, k2 0.200 ms" in capsys.readouterr().out
