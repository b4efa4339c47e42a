"""egg bench on the CPU with scripted agent/evaluator: one thread per task, resumable, reports."""
import json
import subprocess
import sys

from graph.bench import bench
from state.bench import BenchResults
from tests.conftest import ROOT
from tests.support import ScriptedAgent, ScriptedEvaluator, read_log

SCRIPT = {"algorithm_design": [[{"ms": 1.0}]], "parallel_mapping": [[{"ms": 0.5}]],
          "tiling": [[{"ms": 0.6}]], "memory_optimization": [[{"ms": 0.4}]]}


def make_suite(tmp_path, n=3):
    d = tmp_path / "suite" / "level1"
    d.mkdir(parents=True)
    src = (ROOT / "tests" / "tasks" / "relu_small.py").read_text()
    for i in range(n):
        (d / f"{i:02d}_task.py").write_text(src)
    (d / "99_broken.py").write_text("class Model(:\n")
    return tmp_path / "suite"


def test_bench_runs_each_task_once_and_reports(tmp_path):
    suite = make_suite(tmp_path)
    log = str(tmp_path / "eval.log")
    res = bench([str(suite)], out_dir=str(tmp_path / "out"), agent_obj=ScriptedAgent(SCRIPT),
                evaluator_obj=ScriptedEvaluator(log=log), profile="h200")
    keys = [r.task for r in res.results]
    assert keys == ["level1/00_task", "level1/01_task", "level1/02_task", "level1/99_broken"]
    assert [r.status for r in res.results] == ["verified"] * 3 + ["error"]
    s = res.summary
    assert s.tasks == 4 and s.correct == 3 and s.correctness_rate == 0.75
    assert s.fast_p_eager["1.0"] == 0.75 and s.fast_p_eager["2.0"] == 0.75  # 2.0 / 0.4 = 5x
    assert abs(s.geomean_speedup_eager - 5.0) < 1e-9
    r0 = res.results[0]
    assert r0.stage_best_ms == {"algorithm_design": 1.0, "parallel_mapping": 0.5, "tiling": 0.5,
                                "memory_optimization": 0.4}
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| level1/00_task | verified |" in md and "99_broken" in md and "fast_p" in md
    assert (tmp_path / "out" / "results.png").stat().st_size > 1000
    n_evals = len(read_log(log))
    # a second bench over the same checkpoint runs nothing again
    again = bench([str(suite)], out_dir=str(tmp_path / "out"), agent_obj=ScriptedAgent(SCRIPT),
                  evaluator_obj=ScriptedEvaluator(log=log), profile="h200")
    assert len(read_log(log)) == n_evals
    assert [r.status for r in again.results] == [r.status for r in res.results]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["summary"]["correct"] == 3


def test_bench_compare_and_bad_input(tmp_path):
    suite = make_suite(tmp_path, n=2)
    bench([str(suite)], out_dir=str(tmp_path / "a"), agent_obj=ScriptedAgent(SCRIPT),
              evaluator_obj=ScriptedEvaluator(), profile="h200")
    slower = {**SCRIPT, "memory_optimization": [[{"ms": 0.8}]]}
    bench([str(suite)], out_dir=str(tmp_path / "b"), agent_obj=ScriptedAgent(slower),
          evaluator_obj=ScriptedEvaluator(), profile="h200")
    r = subprocess.run([sys.executable, "-m", "graph.cli", "bench", "--compare", str(tmp_path / "a" / "results.json"),
                        str(tmp_path / "b" / "results.json")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "level1/00_task" in r.stdout and "5.00" in r.stdout and "4.00" in r.stdout
    assert "same verdict: 3/3 tasks in both" in r.stdout and "over 1 slot(s)" in r.stdout
    assert "more than once" not in r.stdout
    from artifacts.bench_report import compare
    a = BenchResults.model_validate_json((tmp_path / "a" / "results.json").read_text())
    b = a.model_copy(update={"results": a.results + a.results[:1]})  # a task reported twice is called out
    b.results[1] = b.results[1].model_copy(update={"status": "failed"})
    text = compare(a, b)
    assert "reported more than once in B: level1/00_task" in text and "same verdict: 2/3" in text
    # a run rooted one folder up names its tasks with that folder: still the same tasks
    up = a.model_copy(update={"results": [r.model_copy(update={"task": "suite/" + r.task}) for r in a.results]})
    text = compare(a, up)
    assert "same verdict: 3/3" in text and "only in A" not in text and "(new)" not in text
    assert f"over the {a.summary.correct} task(s) verified in both: " in text
    assert "geomean vs torch.compile over the same task(s)" in text and "different GPUs" not in text
    assert "different GPUs (" in compare(a, a.model_copy(update={"device": "another GPU"}))  # ratios only, then
    assert BenchResults.model_validate_json((tmp_path / "a" / "results.json").read_text()).summary.correct == 2
    bad = subprocess.run([sys.executable, "-m", "graph.cli", "bench", "--compare", str(tmp_path / "nope.json"),
                          str(tmp_path / "a" / "results.json")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "no such results file" in bad.stderr and "Traceback" not in bad.stderr
    empty = subprocess.run([sys.executable, "-m", "graph.cli", "bench", str(tmp_path / "nothing")],
                           capture_output=True, text=True, cwd=ROOT)
    assert empty.returncode == 2 and "no such file or folder" in empty.stderr


def _recorded_bench(monkeypatch) -> dict:
    """graph.bench.bench replaced by the scripted bench, the keyword arguments the CLI gave it recorded."""
    import graph.bench
    seen = {}

    def fake_bench(paths, **kw):
        seen.update(kw)
        return bench(paths, out_dir=kw["out_dir"], agent_obj=ScriptedAgent(SCRIPT), evaluator_obj=ScriptedEvaluator(),
                     profile="h200")
    monkeypatch.setattr(graph.bench, "bench", fake_bench)
    return seen


def test_no_compile_reaches_the_baseline_worker(tmp_path, monkeypatch):
    """`egg bench --no-compile`: the flag reaches the evaluator and each worker's setup (a coverage run)."""
    from graph.cli import main
    from runtime.evaluator import make_evaluator
    from runtime.sandbox import SandboxWorker
    seen = _recorded_bench(monkeypatch)
    suite = make_suite(tmp_path, n=1)
    assert main(["bench", str(suite), "--out", str(tmp_path / "o"), "--no-compile"]) == 0
    assert seen["compile_baseline"] is False
    ev = make_evaluator("gpu", "sm_90a", compile_baseline=False)
    assert ev.compile_baseline is False
    assert SandboxWorker("t.py", role="baseline", compile_baseline=False)._setup_payload()["compile"] is False
    assert SandboxWorker("t.py")._setup_payload()["compile"] is True
    assert main(["bench", str(suite), "--no-compile", "--ray"]) == 2


def test_coverage_script_says_which_tasks_the_expert_plans(tmp_path, capsys):
    """benchmarks/coverage.py: a covered task with its kernel count, a declined one with its reason."""
    import json

    from benchmarks import coverage
    from tests.conftest import ROOT
    bad = tmp_path / "bernoulli_mask.py"  # a random op no recorded draw stands for (a plain randn is covered)
    bad.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                   "        return x * torch.bernoulli(x)\n"
                   "def get_inputs():\n    return [torch.rand(4, 8)]\ndef get_init_inputs():\n    return []\n")
    out = tmp_path / "cov.json"
    assert coverage.main([str(ROOT / "tasks/suite/level1/01_relu.py"), str(bad), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    relu, rnd = got[str(ROOT / "tasks/suite/level1/01_relu.py")], got[str(bad)]
    assert relu["ok"] and relu["kernels"] == 1 and relu["why"] is None
    assert not rnd["ok"] and "bernoulli" in rnd["why"]
    assert "covered 1 of 2" in capsys.readouterr().out


def test_compile_mode_reaches_the_baseline_worker(tmp_path, monkeypatch):
    """`egg bench --compile-mode reduce-overhead`: torch.compile with CUDA graphs as the baseline (the fair
    one beside programs replayed as a graph); the mode reaches the baseline worker, which compiles in it."""
    from graph.cli import main
    from runtime.sandbox import SandboxWorker
    from runtime.worker import Worker
    seen = _recorded_bench(monkeypatch)
    suite = make_suite(tmp_path, n=1)
    assert main(["bench", str(suite), "--out", str(tmp_path / "o"), "--compile-mode", "reduce-overhead"]) == 0
    assert seen["compile_baseline"] == "reduce-overhead"
    assert main(["bench", str(suite), "--out", str(tmp_path / "o2")]) == 0 and seen["compile_baseline"] is True
    payload = SandboxWorker("t.py", role="baseline", compile_baseline="reduce-overhead")._setup_payload()
    assert payload["compile"] == "reduce-overhead"
    modes = []
    monkeypatch.setattr("torch.compile", lambda model, **kw: modes.append(kw.get("mode")) or model)
    w = Worker()
    w.compile_note, w.compile_mode, w.compiled = "", "reduce-overhead", None
    w.ref, w.task = (lambda *xs: None), type("T", (), {"make_inputs": staticmethod(lambda seed, dev: [])})()
    monkeypatch.setattr("torch.cuda.synchronize", lambda: None)
    w._compiled_ref()
    assert modes == ["reduce-overhead"]
    assert main(["bench", str(suite), "--compile-mode", "reduce-overhead", "--ray"]) == 2


def test_kbr_makes_a_bench_folder_of_chosen_tasks(tmp_path):
    """benchmarks/kbr.py: tasks by level and number (ranges), or the tasks an earlier results.json measured,
    copied under their level; a rerun replaces the folder; an unknown number says so."""
    import pytest

    from benchmarks.kbr import main, numbers
    kb = tmp_path / "kb"
    for lv, names in (("level1", ["35_GroupNorm_", "36_RMSNorm_", "41_Max_Pooling_1D", "42_Max_Pooling_2D"]),
                      ("level2", ["6_Conv3d_Softmax"])):
        (kb / lv).mkdir(parents=True)
        for n in names:
            (kb / lv / f"{n}.py").write_text("# task\n")
    assert numbers("35,36,41-42") == [35, 36, 41, 42]
    assert main(["m", "level1:35,41-42", "level2:6", "--kb", str(kb), "--dest", str(tmp_path / "kbr")]) == 0
    got = sorted(str(p.relative_to(tmp_path / "kbr" / "m")) for p in (tmp_path / "kbr" / "m").rglob("*.py"))
    assert got == ["level1/35_GroupNorm_.py", "level1/41_Max_Pooling_1D.py", "level1/42_Max_Pooling_2D.py",
                   "level2/6_Conv3d_Softmax.py"]
    (tmp_path / "r.json").write_text(json.dumps({"results": [{"task": "level1/36_RMSNorm_"}]}))
    assert main(["m", "--like", str(tmp_path / "r.json"), "--kb", str(kb), "--dest", str(tmp_path / "kbr")]) == 0
    assert [p.name for p in (tmp_path / "kbr" / "m").rglob("*.py")] == ["36_RMSNorm_.py"]  # replaced, not merged
    with pytest.raises(SystemExit, match=r"no task numbered \[7\]"):
        main(["m", "level2:7", "--kb", str(kb), "--dest", str(tmp_path / "kbr")])


def test_results_by_family_show_each_familys_least_and_median_roofline():
    """Issue 18 judges each family by its tasks' share of the copy floor: the by-family table shows the least
    and the median (from a committed run: level 1's pools at 91b228f, 36% to 61%)."""
    from artifacts.bench_report import markdown
    run = BenchResults.model_validate_json((ROOT / "benchmarks" / "kernelbench_2026-12-06_h100_91b228f_mem.json").read_text())
    md = markdown(run)
    assert "| family | tasks | verified | geomean x eager | geomean x compile | % of roofline (least, median) |" in md
    assert "| pool | 5 | 5 | 2.01 | 1.14 | 36%, 43% |" in md
    assert "| pointwise | 14 | 13 | 1.57 | 1.19 | 88%, 91% |" in md  # 13: task 45 (an OOM) named pointwise then
    from artifacts.bench_report import op_family
    assert op_family(["aten::avg_pool2d"]) == "pool" and op_family(["aten::max_pool3d_with_indices"]) == "pool"
    assert op_family(["aten::native_batch_norm"]) == "norm" and op_family(["aten::relu"]) == "pointwise"
    # a kernel family's task is counted under its operator's family (its own row keeps the kernel's name)
    for r in run.results[:3]:
        r.family = "conv_rows"
    md = markdown(run)
    assert "| conv | 3 |" in md and "| conv_rows |" in md and "| conv_rows | 3 |" not in md


def test_results_show_where_each_programs_time_goes():
    """Issue 19 asks for per-region times in the report: a verified program's kernels, the slowest three with
    their share of the kernels' sum, beside the whole call's time; single-kernel tasks have no row."""
    from artifacts.bench_report import markdown
    run = BenchResults.model_validate_json((ROOT / "benchmarks" / "kernelbench_2026-12-06_h100_91b228f_mem.json").read_text())
    prog, single = run.results[0], run.results[1]
    assert prog.correct and single.correct and not prog.kernel_ms  # (a run from before the field: none recorded)
    assert "## Where each program's time goes" not in markdown(run)
    prog.kernel_ms = {"egg_conv": 0.6, "egg_conv_xt": 0.1, "egg_rows": 0.25, "egg_conv_wt": 0.05}
    single.kernel_ms = {}
    md = markdown(run)
    assert "## Where each program's time goes" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| {prog.task} | 4 |"))
    assert "| 1.000 |" in row and row.endswith("egg_conv 0.600 (60%), egg_rows 0.250 (25%), egg_conv_xt 0.100 (10%) |"), row
    assert not any(line.startswith(f"| {single.task} | ") and "%)" in line for line in md.splitlines())


def test_a_bench_records_each_programs_kernel_times(tmp_path):
    """The best candidate's kernel times (the evaluator's, for a program of 3 kernels) reach results.json and the
    report's table; a single-kernel run records none."""
    suite = make_suite(tmp_path, n=1)
    prog = {s: [[{**p, "regions": 3} for p in rounds[0]]] for s, rounds in SCRIPT.items()}
    res = bench([str(suite)], out_dir=str(tmp_path / "p"), agent_obj=ScriptedAgent(prog), evaluator_obj=ScriptedEvaluator(),
                profile="h200")
    r = res.results[0]
    assert r.correct and list(r.kernel_ms) == ["k0", "k1", "k2"] and abs(sum(r.kernel_ms.values()) - 0.4) < 1e-9
    assert json.loads((tmp_path / "p" / "results.json").read_text())["results"][0]["kernel_ms"] == r.kernel_ms
    assert "| level1/00_task | 3 | 0.400 | 0.400 | k0 0.229 (57%), k1 0.114 (29%), k2 0.057 (14%) |" in \
        (tmp_path / "p" / "results.md").read_text()
    single = bench([str(suite)], out_dir=str(tmp_path / "s"), agent_obj=ScriptedAgent(SCRIPT), evaluator_obj=ScriptedEvaluator(),
                   profile="h200")
    assert single.results[0].kernel_ms == {}
