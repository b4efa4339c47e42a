"""Kill the process in the middle of a stage, resume in a new process: finished nodes are not
run again and no finished evaluation is lost."""
import json
import subprocess
import sys
import textwrap

from tests.conftest import ROOT
from tests.support import read_log

DRIVER = textwrap.dedent("""
    import sys, json
    sys.path.insert(0, {root!r})
    from graph.runner import optimize, resume
    from tests.support import ScriptedAgent, ScriptedEvaluator
    script = {{
        "algorithm_design": [[{{"ms": 1.0}}]],
        "parallel_mapping": [[{{"block": 128, "ms": 0.8}}, {{"block": 256, "ms": 0.7, "kill": True}},
                              {{"block": 512, "ms": 0.6}}]],
        "tiling": [[{{"ms": 0.5}}]],
        "memory_optimization": [[{{"ms": 0.4}}]],
    }}
    agent = ScriptedAgent(script, log={tmp!r} + "/agent.log")
    ev = ScriptedEvaluator(log={tmp!r} + "/eval.log", marker={tmp!r} + "/killed")
    kw = dict(agent_obj=agent, evaluator_obj=ev, checkpoint={checkpoint!r}, quiet=True)
    if sys.argv[1] == "start":
        optimize({task!r}, thread_id="t1", profile="h200", out_dir={tmp!r} + "/out", **kw)
    else:
        st = resume("t1", **kw)
        print(json.dumps({{"status": st.result.status, "best_ms": st.result.best_ms,
                          "evals": [e.candidate_id for e in st.evaluations]}}))
""")


def test_kill_mid_stage_then_resume(tmp_path, relu_task):
    kill_then_resume(tmp_path, relu_task, str(tmp_path / "cp.sqlite"))


def kill_then_resume(tmp_path, relu_task, checkpoint: str) -> None:
    code = DRIVER.format(root=str(ROOT), tmp=str(tmp_path), task=relu_task, checkpoint=checkpoint)
    env = {"LANGGRAPH_STRICT_MSGPACK": "true", "EGG_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    first = subprocess.run([sys.executable, "-c", code, "start"], capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 17, first.stderr  # died inside the parallel_mapping stage
    before = read_log(tmp_path / "eval.log")
    assert (tmp_path / "killed").exists()
    second = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code, "resume"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    out = json.loads(second.stdout.strip().splitlines()[-1])
    assert out["status"] == "verified" and out["best_ms"] == 0.4

    agent = read_log(tmp_path / "agent.log")
    stages = [(a["stage"], a["round"]) for a in agent]
    # each design node ran once: the resumed process did not ask for algorithm_design/parallel_mapping again
    assert stages == [("algorithm_design", 1), ("parallel_mapping", 1), ("tiling", 1), ("memory_optimization", 1)]
    pids = {a["stage"]: a["pid"] for a in agent}
    assert pids["parallel_mapping"] != pids["tiling"]
    evals = [e["candidate"] for e in read_log(tmp_path / "eval.log")]
    # every evaluation that finished before the kill was kept, not re-run
    finished_before = [e["candidate"] for e in before]
    assert any(c.startswith("parallel_mapping") for c in finished_before)  # the kill came mid-stage
    assert all(evals.count(c) == 1 for c in finished_before)
    assert sorted(out["evals"]) == sorted(set(out["evals"]))  # none recorded twice
    assert len(out["evals"]) == 6
