"""Nsight Compute feedback: the report parser on a stored H200 report, the profile's way into the
next stage's request, the expert's ordering and the LLM prompt, `egg history` and the report."""
from pathlib import Path

from agents.expert import advice
from agents.llm.prompts import context_sections, render
from graph.runner import get_run, optimize
from runtime import profiler
from state import Budget, KernelCandidate, KernelProfile
from tests.support import ScriptedAgent, ScriptedEvaluator

REPORT = Path(__file__).parent / "data" / "ncu_tf32x3_square_h200.txt"

# two kernels of one candidate, with the raw metrics section `--metrics` adds (ncu's details layout)
TWO_KERNELS = """==PROF== Connected to process 7 (/usr/bin/python3)
  egg_part (132, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    Memory Throughput                 %        91.20
    DRAM Throughput                   %        91.20
    Duration                         us       812.45
    Compute (SM) Throughput           %        22.10
    ----------------------- ----------- ------------
    Section: Memory Workload Analysis
    Memory Throughput           Gbyte/s       347.10
    ----------------------- ----------- ------------
    Section: Launch Statistics
    ----------------------- ----------- ------------
    Registers Per Thread    register/thread          40
    Static Shared Memory Per Block       Kbyte/block        4.10
    Dynamic Shared Memory Per Block       byte/block           0
    ----------------------- ----------- ------------
    Section: Command line profiler metrics
    ------------------------------------------------------------------------ ----------- ------------
    Metric Name                                                              Metric Unit Metric Value
    ------------------------------------------------------------------------ ----------- ------------
    dram__bytes.sum                                                                Gbyte         3.22
    lts__t_sector_hit_rate.pct                                                         %         2.31
    smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio                 ratio         0.40
    smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio         ratio        11.52
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio                    ratio         0.93
    ------------------------------------------------------------------------ ----------- ------------
  egg_fold (1, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    Duration                         us         3.10
    Memory Throughput                 %         0.50
    Compute (SM) Throughput           %         0.40
  other_kernel (1, 1, 1)x(32, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Duration                         ms        99.00
"""


def test_parses_a_stored_h200_report():
    p = profiler.profile_from_report("c0", REPORT.read_text(), ["egg_gemm"])
    assert p.available and p.kernel == "egg_gemm"
    assert (p.sm_pct, p.memory_pct, p.dram_pct, p.l2_pct) == (51.1, 18.07, 4.52, 18.07)
    assert (p.achieved_occupancy_pct, p.theoretical_occupancy_pct) == (12.49, 12.5)
    assert (p.ipc, p.warp_cycles_per_issue, p.duration_ms) == (2.12, 3.78, 3.14)
    assert (p.busiest_pipe, p.busiest_pipe_pct) == ("ALU", 45.5)
    assert p.limiter == "latency"
    s = p.summary()
    assert "latency-limited" in s and "busiest pipe ALU 46%" in s and "occupancy 12% of 12%" in s


def test_the_longest_own_kernel_leads_and_raw_metrics_are_read():
    p = profiler.profile_from_report("c1", TWO_KERNELS, ["egg_part", "egg_fold"])
    assert p.kernel == "egg_part" and abs(p.duration_ms - 0.81245) < 1e-9
    assert p.other_kernels == ["egg_fold: 0.0031 ms"]  # other_kernel is not the candidate's
    assert p.limiter == "memory" and p.registers == 40 and p.shared_bytes == 4100
    assert p.memory_pct == 91.2  # the percentage, not Memory Workload Analysis's Gbyte/s of the same name
    assert abs(p.dram_bytes - 3.22e9) < 1 and p.l2_hit_pct == 2.31
    assert list(p.stalls) == ["long_scoreboard", "wait", "barrier"]  # largest first


def test_no_profile_is_a_reason_not_an_error(monkeypatch):
    p = profiler.profile_from_report("c2", "==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n", ["k"])
    assert not p.available and "LibraryNotLoaded" in p.note and p.summary().startswith("no profile")
    # the profiled process failed: ncu says only its exit code; the note carries the exception's last line too
    crashed = ("==PROF== Connected to process 7\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB\n"
               "==ERROR== The application returned an error code (1).\n")
    p = profiler.profile_from_report("c4", crashed, ["k"])
    assert not p.available and "error code (1)" in p.note and "OutOfMemoryError: CUDA out of memory" in p.note
    monkeypatch.setattr(profiler, "ncu_path", lambda: None)
    cand = KernelCandidate(id="c3", stage="tiling", cuda_source="", host_code="", kernel_names=["k"])
    p = profiler.profile_candidate("task.py", cand)
    assert not p.available and "not found" in p.note


def test_ncu_command_leaves_the_clocks_and_filters_the_candidates_kernels():
    cmd = profiler.ncu_command("/x/ncu", ["egg_part", "egg_fold"], ["python", "-m", "runtime.profiler"])
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("-k") + 1] == "regex:^(egg_part|egg_fold)$"
    assert "--metrics" in cmd and cmd[-3:] == ["python", "-m", "runtime.profiler"]
    assert "--metrics" not in profiler.ncu_command("/x/ncu", ["k"], [], metrics=False)


def _prof(**kw) -> KernelProfile:
    return KernelProfile(candidate_id="b", kernel="egg_gemm", **kw)


def test_the_expert_orders_a_stages_variants_by_the_profile():
    warps = [{"WM": 2, "WN": 4}, {"WM": 4, "WN": 2}, {"WM": 4, "WN": 4}]
    latency = _prof(sm_pct=51, memory_pct=18, achieved_occupancy_pct=12.5)
    got, why = advice.order("gemm", "parallel_mapping", warps, latency)
    assert got[0] == {"WM": 4, "WN": 4} and "occupancy" in why
    vecs = [{"vec": 1}, {"vec": 4}, {"vec": 2}]
    got, why = advice.order("pointwise", "memory_optimization", vecs, _prof(sm_pct=20, memory_pct=85))
    assert [v["vec"] for v in got] == [4, 2, 1] and "memory-bound" in why
    # nothing to say: the order stays
    assert advice.order("gemm", "parallel_mapping", warps, _prof(sm_pct=90, memory_pct=30)) == (warps, "")
    assert advice.order("gemm", "parallel_mapping", warps, None) == (warps, "")


class ProfilingEvaluator(ScriptedEvaluator):
    def __init__(self):
        super().__init__()
        self.profiled: list[str] = []

    def profile(self, task_path, cand, kernels=None):
        self.profiled.append(cand.id)
        return KernelProfile(candidate_id=cand.id, kernel="k", sm_pct=30.0, memory_pct=88.0, dram_pct=88.0)


SCRIPT = {"algorithm_design": [[{"ms": 1.0}]], "parallel_mapping": [[{"block": 128, "ms": 0.8}]],
          "tiling": [[{"items": 4, "ms": 0.9}]], "memory_optimization": [[{"vec": 4, "ms": 0.5}]]}


def test_each_stage_best_is_profiled_once_and_reaches_the_next_request(tmp_egg, relu_task, capsys):
    agent, ev = ScriptedAgent(SCRIPT), ProfilingEvaluator()
    cp = str(tmp_egg / "cp.sqlite")
    tid, st = optimize(relu_task, agent_obj=agent, evaluator_obj=ev, checkpoint=cp, out_dir=str(tmp_egg / "out"),
                       profile="h200", budget=Budget(), quiet=True)
    dec = {d.stage: d for d in st.design.decisions}
    # tiling kept its input: that kernel is not profiled twice
    assert ev.profiled == [dec["algorithm_design"].chosen_id, dec["parallel_mapping"].chosen_id,
                           dec["memory_optimization"].chosen_id]
    by_stage = {r.stage: r for r in agent.requests}
    assert by_stage["algorithm_design"].best_profile is None
    assert by_stage["tiling"].best_profile.candidate_id == dec["parallel_mapping"].chosen_id
    assert by_stage["memory_optimization"].best_profile.candidate_id == dec["parallel_mapping"].chosen_id
    # the LLM's prompt carries it within its budget
    text = render(context_sections(by_stage["tiling"], "class Model: pass", budget_chars=8000))
    assert "Nsight Compute profile" in text and "memory-limited" in text
    # it survives the checkpoint and shows in the report and in `egg history`
    again = get_run(tid, cp)
    assert [p.candidate_id for p in again.profiles] == ev.profiled
    report = Path(st.result.report_path).read_text()
    assert "## Profiles" in report and "memory-limited" in report
    from graph.cli import main
    capsys.readouterr()
    assert main(["history", tid, "--checkpoint", cp]) == 0
    hist = capsys.readouterr().out
    assert hist.count("profile: k: memory-limited") == 3


def test_no_profile_setting_skips_it(tmp_egg, relu_task):
    agent, ev = ScriptedAgent(SCRIPT), ProfilingEvaluator()
    _, st = optimize(relu_task, agent_obj=agent, evaluator_obj=ev, checkpoint=str(tmp_egg / "cp.sqlite"),
                     out_dir=str(tmp_egg / "out"), profile="h200", quiet=True, kernel_profile=False)
    assert ev.profiled == [] and st.profiles == [] and st.result.status == "verified"


def test_a_programs_profile_takes_its_heaviest_kernels():
    """A whole network launches a hundred kernels and ncu replays each one it profiles some forty times:
    the stage's best is profiled on its PROFILED_KERNELS slowest by measured time, every kernel where it
    has no more or was not timed kernel by kernel."""
    from nodes.verification import PROFILED_KERNELS, heaviest
    from state import Evaluation, Verdict
    ms = {f"k{i}": float(i) for i in range(10)}
    evals = [Evaluation(candidate_id="a", stage="tiling", verdict=Verdict.correct, kernel_ms={"x": 9.0}),
             Evaluation(candidate_id="b", stage="tiling", verdict=Verdict.correct, kernel_ms=ms)]
    assert heaviest(evals, "b") == ["k9", "k8", "k7"][:PROFILED_KERNELS]
    assert heaviest(evals, "a") is None and heaviest(evals, "c") is None
    from runtime.profiler import ncu_command
    cmd = ncu_command("ncu", ["k9", "k8"], ["python"])
    assert "regex:^(k9|k8)$" in cmd and cmd[cmd.index("--launch-count") + 1] == "8"


def test_a_bench_reports_each_best_candidates_design_and_profile(tmp_path):
    """`egg bench` keeps the verified best candidate's description and its Nsight Compute summary per task (the
    issue's GEMM table), and leaves the profile out where the bench ran with --no-profile."""
    from graph.bench import bench
    from tests.test_bench import make_suite
    suite = make_suite(tmp_path, n=1)
    res = bench([str(suite)], out_dir=str(tmp_path / "out"), agent_obj=ScriptedAgent(SCRIPT),
                evaluator_obj=ProfilingEvaluator(), profile="h200")
    r = res.results[0]
    assert r.status == "verified" and r.profile.startswith("k: memory-limited") and r.design
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Profile of the best candidate" in md and f"| {r.task} | k: memory-limited" in md
    off = bench([str(suite)], out_dir=str(tmp_path / "off"), agent_obj=ScriptedAgent(SCRIPT),
                evaluator_obj=ProfilingEvaluator(), profile="h200", kernel_profile=False)
    assert off.results[0].profile is None and "## Profile of the best" not in (tmp_path / "off" / "results.md").read_text()
