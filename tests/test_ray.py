"""egg bench --ray on a local Ray cluster (CPU): scripted agent, the real compile-only runtime,
one worker killed mid-suite; the suite finishes with every task accounted for exactly once."""
import functools

import pytest

from runtime.evaluator import CompileOnlyEvaluator
from tests.support import KillingAgent, ScriptedAgent, read_log
from tests.test_bench import SCRIPT, make_suite

ray = pytest.importorskip("ray")


def test_ray_bench_survives_a_killed_worker(tmp_path):
    from graph.distributed import bench_ray
    suite = make_suite(tmp_path, n=3)
    (suite / "level1" / "99_broken.py").unlink()
    log = str(tmp_path / "agent.log")
    agent_factory = functools.partial(KillingAgent, SCRIPT, log, "01_task", str(tmp_path / "killed"))
    res = bench_ray([str(suite)], out_dir=str(tmp_path / "out"), profile="h200", evaluator="compile_only",
                    agent_factory=agent_factory, evaluator_factory=functools.partial(CompileOnlyEvaluator, "sm_90a"),
                    ray_init={"num_cpus": 2, "include_dashboard": False})
    assert (tmp_path / "killed").exists()  # a worker really died
    assert [r.task for r in res.results] == ["level1/00_task", "level1/01_task", "level1/02_task"]
    assert [r.status for r in res.results] == ["unverified"] * 3  # compiled, not verified: no GPU
    calls = [(e["stage"], e["pid"]) for e in read_log(log)]
    assert len(calls) == 3 * 4  # every stage of every task once: the killed task resumed, nothing repeated
    assert res.summary.tasks == 3
    # the killed task's finished stage ran in the dead worker; the rest in the worker that resumed it
    by_stage = {}
    for e in read_log(log):
        by_stage.setdefault(e["stage"], []).append(e["pid"])
    assert len({pid for pids in by_stage.values() for pid in pids}) >= 2
    assert (tmp_path / "out" / "results.md").exists()


def test_ray_bench_spreads_tasks_over_every_gpu_slot(tmp_path):
    """Two GPU slots (Ray's logical GPUs on this CPU machine): one actor per GPU, each with its own
    CUDA_VISIBLE_DEVICES, the tasks shared between them, every task run once."""
    from graph.distributed import bench_ray
    suite = make_suite(tmp_path, n=4)
    (suite / "level1" / "99_broken.py").unlink()
    log = str(tmp_path / "agent.log")
    res = bench_ray([str(suite)], out_dir=str(tmp_path / "out"), profile="h200", evaluator="compile_only",
                    agent_factory=functools.partial(ScriptedAgent, SCRIPT, log),
                    evaluator_factory=functools.partial(CompileOnlyEvaluator, "sm_90a"),
                    ray_init={"num_cpus": 4, "num_gpus": 2, "include_dashboard": False})
    assert [r.task for r in res.results] == [f"level1/0{i}_task" for i in range(4)]
    assert all(r.status == "unverified" for r in res.results)
    slots = {r.host.split(":")[1] for r in res.results}
    assert slots == {"gpu0", "gpu1"}  # both GPUs took tasks, each actor pinned to its own
    assert res.slots == 2 and res.wall_s is not None and res.wall_s > 0
    calls = read_log(log)
    assert len(calls) == 4 * 4  # every stage of every task exactly once
    assert len({e["pid"] for e in calls}) == 2  # two long-lived workers, not a process per task
    assert "over 2 slot(s)" in (tmp_path / "out" / "results.md").read_text()
