"""On a GPU: the verifier rejects planted cheats and faults with the right reason, and the run
goes on after each; the timing harness reaches the copy bandwidth. `pytest -m gpu`."""
import pytest

from tests import planted
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu
RELU_TASK = str(ROOT / "tests" / "tasks" / "relu_big.py")


@pytest.fixture(scope="module")
def evaluator():
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=60, reps=20)
    yield ev
    ev.close()


def run(ev, c, floor_ms=None):
    (e,) = ev.evaluate(RELU_TASK, [c], floor_ms)
    return e


def test_honest_kernel_is_correct_and_timed(evaluator):
    e = run(evaluator, planted.cand("honest", planted.HONEST))
    assert e.verdict.value == "correct", e.reason
    assert e.correctness.trials == 4 and e.timing.median_ms > 0  # 3 of the task's inputs, 1 widened
    assert e.eager is not None and e.speedup_vs_eager > 0 and e.aten_ops == ["aten::empty.memory_format"]


def test_unwritten_half_fails(evaluator):
    e = run(evaluator, planted.cand("half", planted.SKIPS_HALF, names=["relu_half"]))
    assert e.verdict.value == "incorrect" and "NaN/Inf where the reference is finite" in e.reason


def test_torch_inside_forward_is_rejected(evaluator):
    e = run(evaluator, planted.cand("torch", planted.CALLS_TORCH))
    assert e.verdict.value == "rejected" and "aten::relu" in e.reason


def test_cached_output_is_rejected(evaluator):
    e = run(evaluator, planted.cand("cache", planted.CACHES))
    assert e.verdict.value in ("rejected", "incorrect")
    assert "caching" in e.reason or "off" in e.reason or "skipped" in e.reason


def test_out_of_bounds_write_crashes_only_itself(evaluator):
    e = run(evaluator, planted.cand("oob", planted.OUT_OF_BOUNDS, names=["relu_oob"]))
    assert e.verdict.value == "crashed", e.reason
    after = run(evaluator, planted.cand("honest2", planted.HONEST))
    assert after.verdict.value == "correct", after.reason


def test_hang_times_out_and_the_next_runs(evaluator):
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=20, reps=10)
    try:
        e = run(ev, planted.cand("spin", planted.HANGS, names=["spin"]))
        assert e.verdict.value == "timed_out", e.reason
        after = run(ev, planted.cand("honest3", planted.HONEST))
        assert after.verdict.value == "correct", after.reason
    finally:
        ev.close()


def test_side_stream_work_is_flagged(evaluator):
    e = run(evaluator, planted.cand("side", planted.SIDE_STREAM))
    # either the output was not ready when the stream finished (incorrect), or timing caught it
    assert e.verdict.value != "correct" or "escaped the launch stream" in e.flagged, (e.verdict, e.flagged)
    assert not e.ok


def test_compile_error_is_structured(evaluator):
    e = run(evaluator, planted.cand("broken", planted.HONEST, source=planted.BROKEN))
    assert e.verdict.value == "compile_error"
    assert e.compile.errors and e.compile.errors[0].line == 1 and "undefined_name" in e.compile.errors[0].message


def test_copy_kernel_reaches_copy_bandwidth():
    """The timing harness itself: a plain copy of 1 GiB must land within 10% of the card's copy rate (the profile's
    measured one: 4.19 TB/s on the H200, 3.02 on the H100; its datasheet's elsewhere)."""
    from hardware_profiles import detect
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=120, reps=30)
    try:
        (e,) = ev.evaluate(str(ROOT / "tests" / "tasks" / "copy_big.py"),
                           [planted.cand("copy", planted.COPY, names=["copy"])], None)
    finally:
        ev.close()
    assert e.verdict.value == "correct", e.reason
    tbs = 2 * (1 << 30) / (e.timing.median_ms * 1e-3) / 1e12
    print(f"copy: {e.timing.median_ms:.4f} ms = {tbs:.2f} TB/s (eager clone {e.eager.median_ms:.4f} ms)")
    assert tbs >= 0.9 * detect().bandwidth() / 1e12


def test_no_compile_times_eager_alone():
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=60, reps=5, compile_baseline=False)
    try:
        b = ev.baselines(RELU_TASK)
    finally:
        ev.close()
    assert b.eager.median_ms > 0 and b.compiled is None and "--no-compile" in b.note


def test_baselines_measure_eager_with_tf32_off_beside_it(tmp_egg):
    """A conv's baseline reports eager's error as it runs and with TF32 off (state.eager_ran_tf32 reads the two);
    TF32 off is fp32 grade and no worse than eager as it runs."""
    from runtime.evaluator import GpuEvaluator
    p = tmp_egg / "conv_lse.py"
    p.write_text("""import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3)
    def forward(self, x):
        return torch.logsumexp(self.conv(x), dim=1)
def get_inputs():
    return [torch.rand(8, 64, 34, 34)]
def get_init_inputs():
    return []
""")
    ev = GpuEvaluator(arch=None, timeout_s=60, reps=3, compile_baseline=False)
    try:
        b = ev.baselines(str(p))
    finally:
        ev.close()
    print(f"eager {b.eager_err:.2e}, with TF32 off {b.eager_exact_err:.2e}")
    assert b.eager_exact_err is not None and b.eager_exact_err < 1e-5
    assert b.eager_exact_err <= 1.5 * b.eager_err
