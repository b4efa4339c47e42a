"""`egg --help`, every subcommand, and every bad-input path: one clear line, never a traceback."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def egg(*args, cwd=None, env_extra=None):
    import os
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "graph.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=300)


def one_clear_line(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("egg: error:"), r.stderr
    for n in needles:
        assert n in lines[0]


def test_help_lists_subcommands():
    r = egg("--help")
    assert r.returncode == 0
    for sub in ("optimize", "resume", "runs", "history", "hw"):
        assert sub in r.stdout


def test_missing_task_file(tmp_path):
    one_clear_line(egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", str(tmp_path / "nope.py")),
                   "no such task file")


def test_task_without_model(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("import torch\ndef get_inputs():\n    return [torch.randn(3)]\n")
    one_clear_line(egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", str(f)),
                   "missing Model, get_init_inputs")


def test_task_with_syntax_error(tmp_path):
    f = tmp_path / "broken.py"
    f.write_text("class Model(:\n")
    one_clear_line(egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", str(f)), "broken.py:1: syntax error")


def test_task_whose_get_inputs_raises(tmp_path):
    f = tmp_path / "raises.py"
    f.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n"
                 "def get_inputs():\n    raise RuntimeError('boom')\ndef get_init_inputs():\n    return []\n")
    one_clear_line(egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", str(f)),
                   "get_inputs() raised RuntimeError: boom")


def test_unknown_profile(tmp_path, relu_task):
    one_clear_line(egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", relu_task, "--profile", "tpu9"),
                   "unknown hardware profile 'tpu9'")
    one_clear_line(egg("hw", "--profile", "tpu9"), "unknown hardware profile")


def test_unknown_agent(tmp_path, relu_task):
    one_clear_line(egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", relu_task, "--agent", "wizard"),
                   "unknown agent 'wizard'")


def test_bad_budget(tmp_path, relu_task):
    one_clear_line(egg("optimize", relu_task, "--total-candidates", "0"), "--total-candidates must be at least 1")


@pytest.mark.parametrize("cmd", [["resume", "ghost"], ["history", "ghost"]])
def test_unknown_thread(tmp_path, relu_task, cmd):
    cp = str(tmp_path / "c.sqlite")
    one_clear_line(egg("--checkpoint", cp, *cmd), "no checkpoint file")
    from graph.checkpointing import open_checkpointer
    with open_checkpointer(cp):
        pass  # an empty checkpoint file
    one_clear_line(egg("--checkpoint", cp, *cmd), "unknown thread 'ghost'")


def test_runs_without_checkpoint_file(tmp_path):
    one_clear_line(egg("--checkpoint", str(tmp_path / "none.sqlite"), "runs"), "no checkpoint file")


def test_hw_named_profile_and_no_device():
    r = egg("hw", "--profile", "h200")
    assert r.returncode == 0 and "h200" in r.stdout and "132 SMs" in r.stdout and "4.19 TB/s" in r.stdout
    r = egg("hw")
    assert r.returncode == 0 and ("no CUDA device found" in r.stdout or "detected" in r.stdout)


def test_optimize_history_runs_on_cpu(tmp_path, relu_task):
    """The main job on a machine without a GPU: expert kernels compile, nothing is claimed verified."""
    cp = str(tmp_path / "c.sqlite")
    env = {"EGG_CACHE_DIR": str(tmp_path / "cache")}
    r = egg("--checkpoint", cp, "optimize", relu_task, "--thread", "cpu1", "--out", str(tmp_path / "out"),
            "--evaluator", "compile_only", env_extra=env)
    assert r.returncode == 0, r.stderr
    assert "status: unverified" in r.stdout
    h = egg("--checkpoint", cp, "history", "cpu1", env_extra=env)
    assert h.returncode == 0 and "algorithm_design" in h.stdout and "compiled_only" in h.stdout
    runs = egg("--checkpoint", cp, "runs", env_extra=env)
    assert "cpu1" in runs.stdout and "unverified" in runs.stdout
    one_clear_line(egg("--checkpoint", cp, "optimize", relu_task, "--thread", "cpu1", env_extra=env),
                   "already exists")


def test_history_shows_a_rewrites_own_floor(tmp_path):
    """A matmul only summed over its columns (the gemm_sum family) declares its own FLOPs: `egg history` says
    so, and which floor the verifier held it to."""
    task = tmp_path / "t.py"
    task.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n        self.lin = nn.Linear(64, 96)\n    def forward(self, x):\n"
                    "        return torch.sum(self.lin(x), dim=1, keepdim=True) * 0.5\n"
                    "def get_inputs():\n    return [torch.randn(32, 64)]\ndef get_init_inputs():\n    return []\n")
    cp = str(tmp_path / "c.sqlite")
    env = {"EGG_CACHE_DIR": str(tmp_path / "cache")}
    r = egg("--checkpoint", cp, "optimize", str(task), "--thread", "sum1", "--out", str(tmp_path / "out"),
            "--evaluator", "compile_only", env_extra=env)
    assert r.returncode == 0, r.stderr
    h = egg("--checkpoint", cp, "history", "sum1", env_extra=env)
    line = next(ln for ln in h.stdout.splitlines() if "rewrite:" in ln)
    assert f"{96 * 64 + 2 * 32 * 64:.3g} FLOP" in line and "held to a floor of" in line


def test_history_shows_the_heaviest_kernels_resources():
    """A conv's staging kernels come first in its compile report: history shows the slowest kernel's registers where
    kernels were timed one by one, else the one with the most."""
    from graph.cli import _heaviest
    from state.evaluation import KernelResources
    res = [KernelResources(name="egg_conv_xt", registers=24, shared_bytes=4224), KernelResources(name="egg_conv_wt", registers=10),
           KernelResources(name="egg_conv", registers=95)]
    assert _heaviest(res, None).name == "egg_conv"
    assert _heaviest(res, {"egg_conv_xt": 0.9, "egg_conv": 0.5}).name == "egg_conv_xt"
    assert _heaviest([], None) is None


def test_the_report_shows_the_nan_trial():
    from artifacts.export import report_markdown
    from state import CorrectnessResult, DesignRecord, Evaluation, RunSettings, RunState
    ev = Evaluation(candidate_id="c0", stage="algorithm_design", verdict="correct",
                    correctness=CorrectnessResult(passed=True, trials=4, truth="float64 on cuda", detail="4 comparison(s)",
                                                  nan_trial="passed"))
    st = RunState(settings=RunSettings(task_path="t.py"), evaluations=[ev], design=DesignRecord(best_id="c0"))
    assert "truth: float64 on cuda): 4 trials; 4 comparison(s); NaN trial passed" in report_markdown(st)
    ev.correctness.nan_trial = ""  # not run (the kernelbench rule): nothing said
    assert "NaN trial" not in report_markdown(st)


def test_a_kernels_dynamic_shared_memory_is_recorded_and_shown(tmp_egg):
    """The evaluator notes each kernel's dynamic shared memory as launched (the compiler reports static only: the
    whole-K conv's 97 KB ring showed as 0 B); history and the report show static plus dynamic."""
    from types import SimpleNamespace

    from artifacts.export import report_markdown
    from runtime.worker import note_dynamic_smem
    from state import CompileResult, Evaluation, KernelResources
    ev = Evaluation(candidate_id="c0", stage="algorithm_design", verdict="correct",
                    compile=CompileResult(ok=True, backend="cupy", arch="sm_90a",
                                          resources=[KernelResources(name="egg_conv", registers=95, shared_bytes=1024),
                                                     KernelResources(name="egg_conv_xt", registers=24, shared_bytes=4224)]))
    note_dynamic_smem(ev, SimpleNamespace(dynamic_smem={"egg_conv": 99328}))
    note_dynamic_smem(ev, SimpleNamespace(dynamic_smem={"egg_conv": 512}))  # the most any launch asked for stays
    conv, xt = ev.compile.resources
    assert (conv.dynamic_shared_bytes, conv.shared_total, xt.shared_total) == (99328, 100352, 4224)
    from state import DesignRecord, RunSettings, RunState
    st = RunState(settings=RunSettings(task_path="t.py"), evaluations=[ev], design=DesignRecord(best_id="c0"))
    assert "- egg_conv: 95 registers, 100352 B shared (99328 B of it dynamic)" in report_markdown(st)
