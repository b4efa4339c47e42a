"""The rooms of the code and which way the arrows go (README, "Layout"): a test that walks every
module's imports (top-level and inside functions) and fails on an arrow the wrong way, so an
import cycle between graph/, nodes/, agents/, runtime/ cannot come back; plus the settings'
own validation and the stage conclusion rules."""
import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.conftest import ROOT

# each package may import only these of the project's packages (itself always)
ALLOWED = {
    "state": {"hardware_profiles"},
    "hardware_profiles": set(),
    "tasks": {"state"},
    "runtime": {"state", "tasks"},
    "agents": {"state", "tasks", "hardware_profiles"},
    "context": {"agents", "runtime", "hardware_profiles", "state"},
    "nodes": {"context", "agents", "runtime", "state", "tasks", "artifacts", "hardware_profiles"},
    "artifacts": {"state", "runtime"},
    "graph": {"nodes", "context", "agents", "runtime", "state", "tasks", "artifacts", "hardware_profiles"},
}


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_no_arrow_points_the_wrong_way():
    bad = []
    for pkg, allowed in ALLOWED.items():
        for f in (ROOT / pkg).rglob("*.py"):
            for dep in imports_of(f) & set(ALLOWED):
                if dep != pkg and dep not in allowed:
                    bad.append(f"{f.relative_to(ROOT)} imports {dep}")
    assert not bad, bad


def test_the_walker_sees_a_lazy_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from graph.runner import x\n")
    assert "graph" in imports_of(f)


def test_settings_validate_themselves():
    from state import Budget, LLMConfig, RunSettings
    with pytest.raises(ValidationError):
        Budget(total_candidates=0)
    with pytest.raises(ValidationError):
        RunSettings(task_path="t.py", guard_policy="lenient")
    with pytest.raises(ValidationError):
        RunSettings(task_path="t.py", evaluator="tpu")
    with pytest.raises(ValidationError):
        RunSettings(task_path="t.py", timing_reps=0)
    with pytest.raises(ValidationError):
        RunSettings(task_path="t.py", tolerance="loose")
    with pytest.raises(ValidationError):
        LLMConfig(max_retries=-3)
    from agents.protocol import ProposedKernel
    with pytest.raises(ValidationError):
        ProposedKernel(cuda_source="", host_code="", kernel_names=[], guard_policy="lenient")


def test_run_policy_overrides_the_agents_wish():
    from nodes.design import guard_policy
    assert guard_policy("auto", "mixed") == "mixed"
    assert guard_policy("strict", "mixed") == "strict"
    assert guard_policy("mixed", "strict") == "mixed"


def test_one_stage_table():
    from graph.builder import DESIGN_NODES
    from state import NEXT_STAGE, STAGE_TABLE, STAGES
    assert list(DESIGN_NODES) == STAGES == list(STAGE_TABLE)
    assert [NEXT_STAGE[s] for s in STAGES] == STAGES[1:] + ["finalize"]
    assert all(DESIGN_NODES[s].__name__ == s for s in STAGES)


def _state(stage, rnd, evals, best_ms=None, budget=None):
    from state import Budget, DesignRecord, Evaluation, KernelCandidate, RunSettings, RunState, Timing, Verdict
    cands = [KernelCandidate(id=e[0], stage=stage, cuda_source="", host_code="", kernel_names=[], params={"b": i})
             for i, e in enumerate(evals)]
    evs = [Evaluation(candidate_id=cid, stage=stage, verdict=Verdict(v), reason=why,
                      timing=Timing(median_ms=ms, p10_ms=ms, p90_ms=ms, reps=1) if ms else None)
           for cid, v, ms, why in evals]
    design = DesignRecord(best_id="prev" if best_ms else None, best_ms=best_ms)
    if best_ms:
        cands.append(KernelCandidate(id="prev", stage="x", cuda_source="", host_code="", kernel_names=[]))
    st = RunState(settings=RunSettings(task_path="t.py", budget=budget or Budget()), stage=stage, round=rnd,
                  candidates=cands, evaluations=evs, design=design)
    return st, evs


def test_conclude_algorithm_design():
    from nodes.verification import conclude
    st, evs = _state("algorithm_design", 1, [("a", "incorrect", None, "off"), ("b", "correct", 2.0, "")])
    up = conclude(st, evs, compile_only=False)
    assert up["stage_done"] and up["design"].best_id == "b" and up["design"].best_ms == 2.0
    st, evs = _state("algorithm_design", 1, [("a", "incorrect", None, "off")])
    assert conclude(st, evs, compile_only=False) == {"stage_done": False}  # another round
    st, evs = _state("algorithm_design", 3, [("a", "incorrect", None, "off")])
    assert conclude(st, evs, compile_only=False)["failure"] == "no correct kernel after 3 round(s)"
    st, evs = _state("algorithm_design", 3, [("a", "out_of_memory", None, "needs 200.0 GiB, the GPU has 139.8 GiB")])
    assert "out of memory" in conclude(st, evs, compile_only=False)["failure"]
    st, evs = _state("algorithm_design", 1, [("a", "compiled_only", None, "")])
    up = conclude(st, evs, compile_only=True)
    assert up["design"].best_id == "a" and up["design"].best_ms is None


def test_conclude_tuning_keeps_the_better():
    from nodes.verification import conclude
    st, evs = _state("tiling", 1, [("a", "correct", 3.0, ""), ("b", "correct", 2.5, "")], best_ms=2.0)
    d = conclude(st, evs, compile_only=False)["design"]
    assert d.best_id == "prev" and d.best_ms == 2.0 and not d.decisions[-1].improved  # kept its input
    st, evs = _state("tiling", 1, [("a", "correct", 1.5, ""), ("b", "rejected", None, "")], best_ms=2.0)
    d = conclude(st, evs, compile_only=False)["design"]
    assert d.best_id == "a" and d.decisions[-1].improved and d.decisions[-1].input_ms == 2.0
