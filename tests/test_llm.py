"""The LLM agent through the real langchain-openai client against a local scripted server."""
import pytest

from agents.protocol import StageRequest
from agents.llm import HybridAgent, LLMAgent
from agents.llm.prompts import context_sections, render
from graph.runner import optimize
from hardware_profiles import load_profile
from runtime.compile import compile_check
from state import Budget, DesignRecord, LLMConfig, StageAttempt, Verdict
from tasks import load_task, task_spec
from tests.conftest import ROOT
from tests.llm_conversation import REPLIES, reply, CORRECT
from tests.llm_server import ScriptedLLMServer
from tests.support import ScriptedEvaluator


class CompileThenJudge(ScriptedEvaluator):
    """Real NVRTC compile; correctness judged by whether the kernel applies the ReLU (CPU stand-in
    for the GPU verifier, which runs the same conversation in test_gpu_llm.py)."""

    def evaluate(self, task_path, candidates, floor_ms):
        out = []
        for c in candidates:
            res = compile_check(c.cuda_source, c.compile_options, "sm_90a")
            if not res.ok:
                (ev,) = super().evaluate(task_path, [c.model_copy(update={"params": {"verdict": "compile_error"}})], floor_ms)
                ev.compile, ev.reason = res, "; ".join(e.message for e in res.errors)
            elif "? 0.0f : x[i]" not in c.cuda_source:
                (ev,) = super().evaluate(task_path, [c.model_copy(update={"params": {"verdict": "incorrect"}})], floor_ms)
                ev.reason = "trial 0: output 0: 2048 of 4096 elements off; first at flat index 3: got -0.5, want 0"
            else:
                ms = 1.0 / (1 + c.params.get("block", 256) / 1024)
                (ev,) = super().evaluate(task_path, [c.model_copy(update={"params": {"ms": ms}})], floor_ms)
            out.append(ev)
        return out


def test_scripted_conversation_end_to_end(tmp_egg, relu_task):
    with ScriptedLLMServer(REPLIES) as srv:
        agent = LLMAgent("scripted-model", LLMConfig(base_url=srv.base_url, max_retries=0, timeout_s=30))
        _, st = optimize(relu_task, agent="openai:scripted-model", agent_obj=agent, evaluator_obj=CompileThenJudge(),
                         checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"), profile="h200",
                         budget=Budget(algorithm_rounds=3), quiet=True)
        prompts = srv.prompts()
    assert len(prompts) == 7
    assert all(r["body"]["model"] == "scripted-model" for r in srv.requests)
    assert "response_format" in srv.requests[0]["body"]  # structured output was asked for
    system = srv.requests[0]["body"]["messages"][0]["content"]
    assert "float64 reference" in system and "puts NaN in the" in system  # what the verifier checks, NaN trial included
    assert "did not parse as JSON" in prompts[1]
    assert 'identifier "undefined_thing" is undefined' in prompts[2]  # the compile error reaches the next round
    assert "elements off" in prompts[3]  # so does the mismatch
    assert "Decisions so far" in prompts[4] and "algorithm_design: chose algorithm_design-r3-c0" in prompts[4]
    assert "The best kernel so far" in prompts[4] and "x[i] < 0.0f ? 0.0f : x[i]" in prompts[4]
    assert "Principles for this stage" in prompts[5] and "independent loads" in prompts[5]
    verdicts = [(a.stage, a.verdict) for a in st.attempts]
    assert verdicts[:3] == [("algorithm_design", "compile_error"), ("algorithm_design", "incorrect"),
                            ("algorithm_design", "correct")]
    assert st.result.status == "verified"
    assert st.candidate(st.design.best_id).params == {"block": 1024}


def test_malformed_replies_never_crash(tmp_egg, relu_task):
    with ScriptedLLMServer(["not json"] * 3 + ["{\"kernels\": []}"] * 3 + ['{"kernels": [{"cuda_source": "x", '
                           '"host_code": "y", "kernel_names": ["k"]}]}'] * 3) as srv:
        agent = LLMAgent("m", LLMConfig(base_url=srv.base_url, max_retries=0, reply_attempts=3))
        _, st = optimize(relu_task, agent_obj=agent, evaluator_obj=CompileThenJudge(), quiet=True,
                         checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"), profile="h200",
                         budget=Budget(algorithm_rounds=3))
        prompts = srv.prompts()
    assert len(prompts) == 9
    assert "contained no kernel" in prompts[4] and "not defined in cuda_source" in prompts[7]
    assert st.result.status == "failed" and "no correct kernel after 3 round" in st.result.message


def test_endpoint_down_is_a_failed_round_not_a_crash(tmp_egg, relu_task):
    agent = LLMAgent("m", LLMConfig(base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=2))
    _, st = optimize(relu_task, agent_obj=agent, evaluator_obj=CompileThenJudge(), quiet=True,
                     checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"), profile="h200",
                     budget=Budget(algorithm_rounds=1))
    assert st.result.status == "failed"


def _req(stage, attempts, best=None):
    task = load_task(ROOT / "tests" / "tasks" / "relu_small.py")
    return StageRequest(stage=stage, round=len(attempts) + 1, task=task_spec(task), analysis=None,
                        profile=load_profile("h200"), design=DesignRecord(), attempts=attempts, best=best,
                        max_candidates=2)


def test_context_budget_holds_on_a_long_run():
    attempts = [StageAttempt(stage="tiling", round=i, candidate_id=f"tiling-r{i}-c0", params={"items": i},
                             verdict="compile_error", reason="x" * 400,
                             compile_errors=[f"line {i}: error number {i} " + "y" * 300])
                for i in range(1, 200)]
    src = (ROOT / "tests" / "tasks" / "relu_small.py").read_text()
    for budget in (6000, 24000):
        text = render(context_sections(_req("tiling", attempts), src, budget, recent=3))
        assert len(text) <= budget + 200
        assert "error number 199" in text and "Latest attempts" in text  # recent attempts verbatim
    text = render(context_sections(_req("tiling", attempts), src, 10**6, recent=3))
    assert "tiling-r5-c0" in text and "error number 5 " not in text  # older ones summarized


def test_hybrid_uses_the_expert_first_and_the_llm_for_tuning():
    with ScriptedLLMServer([reply(CORRECT, 512)]) as srv:
        hybrid = HybridAgent(LLMAgent("m", LLMConfig(base_url=srv.base_url, max_retries=0)))
        first = hybrid.propose(_req("algorithm_design", []))
        assert first.kernels and first.kernels[0].family == "pointwise" and not srv.requests  # the expert's
        tuned = hybrid.propose(_req("parallel_mapping", []))
        assert tuned.kernels[0].family == "llm" and tuned.kernels[0].guard_policy == "strict"
        assert len(srv.requests) == 1


def test_hybrid_falls_back_to_the_llm_under_mixed_policy(tmp_path):
    task = tmp_path / "attention.py"  # a form the expert does not lower (causal attention)
    task.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, q, k, v):\n"
                    "        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
                    "def get_inputs():\n    return [torch.randn(2, 4, 16, 8) for _ in range(3)]\n"
                    "def get_init_inputs():\n    return []\n")
    with ScriptedLLMServer([reply(CORRECT)]) as srv:
        hybrid = HybridAgent(LLMAgent("m", LLMConfig(base_url=srv.base_url, max_retries=0)))
        req = _req("algorithm_design", []).model_copy(update={"task": task_spec(load_task(task))})
        p = hybrid.propose(req)
        assert p.kernels[0].guard_policy == "mixed" and len(srv.requests) == 1


@pytest.mark.parametrize("spec", ["openai:", "hybrid:"])
def test_agent_spec_needs_a_model(spec):
    from agents.registry import UnknownAgentError, make_agent
    with pytest.raises(UnknownAgentError, match="name the model"):
        make_agent(spec)
    assert Verdict.correct.value == "correct"
