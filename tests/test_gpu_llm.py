"""On a GPU: the scripted LLM conversation end to end with the real compile and verification."""
import pytest

from agents.llm import LLMAgent
from graph.runner import optimize
from state import Budget, LLMConfig
from tests.llm_conversation import REPLIES
from tests.llm_server import ScriptedLLMServer

pytestmark = pytest.mark.gpu


def test_scripted_conversation_on_the_gpu(tmp_egg, relu_task):
    with ScriptedLLMServer(REPLIES) as srv:
        agent = LLMAgent("scripted-model", LLMConfig(base_url=srv.base_url, max_retries=0, timeout_s=30))
        _, st = optimize(relu_task, agent_obj=agent, checkpoint=str(tmp_egg / "cp.sqlite"), timing_reps=10,
                         out_dir=str(tmp_egg / "out"), budget=Budget(algorithm_rounds=3), quiet=True)
        prompts = srv.prompts()
    verdicts = [(a.stage, a.verdict) for a in st.attempts]
    assert verdicts[:3] == [("algorithm_design", "compile_error"), ("algorithm_design", "incorrect"),
                            ("algorithm_design", "correct")], [(a.verdict, a.reason) for a in st.attempts]
    assert "undefined_thing" in prompts[2] and "elements off" in prompts[3]
    assert st.result.status == "verified"
