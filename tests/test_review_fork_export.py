"""Review pauses (interrupt), time travel (fork) and export, on the CPU."""
import ast
import subprocess
import sys

from graph.runner import export, fork, get_run, list_runs, optimize, resume
from state import Budget
from tests.conftest import ROOT
from tests.support import ScriptedAgent, ScriptedEvaluator

SCRIPT = {"algorithm_design": [[{"ms": 1.0}]], "parallel_mapping": [[{"block": 128, "ms": 0.8}, {"block": 256, "ms": 0.9}]],
          "tiling": [[{"items": 2, "ms": 0.7}]], "memory_optimization": [[{"vec": 4, "ms": 0.5}]]}


class EditableAgent(ScriptedAgent):
    """Honours a reviewer's edit the way the expert does: the override's params become the candidates."""

    def propose(self, req):
        if req.params_override is not None:
            from agents import Proposal
            from tests.support import kernel
            return Proposal(kernels=[kernel(**p) for p in req.params_override])
        return super().propose(req)


def kw(tmp_egg, **extra):
    return dict(checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"), profile="h200", quiet=True,
                evaluator_obj=ScriptedEvaluator(), **extra)


def test_review_approve_edit_skip_from_python(tmp_egg, relu_task):
    seen = []

    def reviewer(pause):
        seen.append(pause)
        return {"parallel_mapping": {"action": "edit", "params": [{"block": 1024, "ms": 0.6}]},
                "tiling": "skip"}.get(pause["stage"], "approve")
    _, st = optimize(relu_task, agent_obj=EditableAgent(SCRIPT), review=True, reviewer=reviewer, **kw(tmp_egg))
    assert [p["stage"] for p in seen] == ["algorithm_design", "parallel_mapping", "tiling", "memory_optimization"]
    assert seen[1]["candidates"][0]["params"] == {"block": 128, "ms": 0.8} and "plan for" in seen[1]["plan"]
    dec = {d.stage: d for d in st.design.decisions}
    assert dec["parallel_mapping"].params == {"block": 1024, "ms": 0.6}
    assert dec["tiling"].candidates_tried == 0 and not dec["tiling"].improved
    assert st.result.status == "verified" and st.result.best_ms == 0.5


def test_review_pause_survives_a_restart(tmp_egg, relu_task):
    cp = str(tmp_egg / "cp.sqlite")
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from graph.runner import optimize\nfrom tests.support import ScriptedAgent, ScriptedEvaluator\n"
            f"from tests.test_review_fork_export import SCRIPT\n"
            f"optimize({relu_task!r}, thread_id='rv', review=True, agent_obj=ScriptedAgent(SCRIPT), "
            f"evaluator_obj=ScriptedEvaluator(), checkpoint={cp!r}, out_dir={str(tmp_egg / 'out')!r}, profile='h200', quiet=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [x.status for x in list_runs(cp)] == ["paused"]
    # a new process answers the pause; each later stage pauses again until approved
    for _ in range(4):
        st = resume("rv", checkpoint=cp, decision="approve", agent_obj=ScriptedAgent(SCRIPT),
                    evaluator_obj=ScriptedEvaluator(), quiet=True)
    assert st.result.status == "verified" and st.result.best_ms == 0.5
    try:
        resume("rv", checkpoint=cp, quiet=True)  # finished: nothing to answer, nothing re-run
    except ValueError:
        raise AssertionError("a finished run must not ask for a review decision") from None


def test_fork_before_a_stage_keeps_the_original(tmp_egg, relu_task):
    tid, original = optimize(relu_task, agent_obj=ScriptedAgent(SCRIPT), **kw(tmp_egg))
    cp = str(tmp_egg / "cp.sqlite")
    branch = fork(tid, "tiling", checkpoint=cp, budget=Budget(candidates_per_stage=1))
    faster = {**SCRIPT, "tiling": [[{"items": 8, "ms": 0.3}]], "memory_optimization": [[{"vec": 8, "ms": 0.35}]]}
    st = resume(branch, checkpoint=cp, agent_obj=ScriptedAgent(faster), evaluator_obj=ScriptedEvaluator(), quiet=True)
    assert st.settings.forked_from == f"{tid}@tiling" and st.settings.budget.candidates_per_stage == 1
    assert [d.stage for d in st.design.decisions] == ["algorithm_design", "parallel_mapping", "tiling",
                                                      "memory_optimization"]
    assert st.design.best_ms == 0.3 and st.result.status == "verified"
    again = get_run(tid, cp)
    assert again.design.best_ms == original.design.best_ms == 0.5 and len(again.candidates) == len(original.candidates)
    h = subprocess.run([sys.executable, "-m", "graph.cli", "--checkpoint", cp, "history", branch],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert f"forked from {tid} before tiling" in h.stdout


def test_export_writes_a_module_that_needs_no_egg(tmp_egg, relu_task):
    tid, st = optimize(relu_task, agent_obj=ScriptedAgent(SCRIPT), **kw(tmp_egg))
    paths = export(tid, tmp_egg / "exported", checkpoint=str(tmp_egg / "cp.sqlite"))
    module = open(paths["module_path"]).read()
    imported = set()
    for node in ast.walk(ast.parse(module)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    # weakref, re, ctypes (egg.tmap's encode through the driver): the standard library
    assert imported <= {"__future__", "torch", "numpy", "cupy", "weakref", "re", "ctypes"}, imported
    assert open(paths["kernel_path"]).read() == st.candidate(st.design.best_id).cuda_source
    assert "## Stages" in open(paths["report_path"]).read()
    r = subprocess.run([sys.executable, "-m", "graph.cli", "--checkpoint", str(tmp_egg / "cp.sqlite"), "export", tid,
                        str(tmp_egg / "cli_export")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and (tmp_egg / "cli_export" / "model_new.py").exists()
