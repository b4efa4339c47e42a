"""On a GPU: the verifier of issues 13, 14 and 21. Tasks at KernelBench's sizes fit (memory plan,
peak reported), indices past 2^31 work, the float64 rule and the KernelBench rule both run, and
every planted way past the verifier ends rejected or incorrect with a reason that names it.
`pytest -m gpu tests/test_gpu_verifier.py`."""
import pytest

from tests import planted
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu
TASKS = ROOT / "tests" / "tasks"
RELU_RAND = str(TASKS / "relu_rand.py")


@pytest.fixture(scope="module")
def evaluator():
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=120, reps=20)
    yield ev
    ev.close()


def run(ev, c, task=RELU_RAND):
    (e,) = ev.evaluate(task, [c], None)
    return e


def test_honest_kernel_float64_rule(evaluator):
    e = run(evaluator, planted.cand("honest", planted.HONEST))
    assert e.verdict.value == "correct", e.reason
    c = e.correctness
    assert c.rule == "float64" and c.truth == "float64 on cuda" and c.trials == 4  # 3 task trials + 1 widened
    assert any(x.trial.startswith("widened") for x in c.errors)
    assert all(x.cand_norm <= 32 * x.eager_norm + 1e-6 for x in c.errors)
    assert e.eager is not None and e.speedup_vs_eager > 0 and "timed call" in e.reason
    assert e.timing_cost_s > 0 and e.peak_bytes and e.eager_peak_bytes


def test_kernelbench_rule():
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=120, reps=10, tolerance="kernelbench")
    try:
        e = run(ev, planted.cand("honest_kb", planted.HONEST))
        assert e.verdict.value == "correct" and e.correctness.rule == "kernelbench" and e.correctness.trials == 5
        assert e.correctness.nan_trial == ""  # KernelBench's own rule has no NaN trial
        bad = run(ev, planted.cand("half_kb", planted.SKIPS_HALF, names=["relu_half"]))
        assert bad.verdict.value == "incorrect"
    finally:
        ev.close()


def test_copy_passes_as_relu_only_on_the_tasks_own_inputs(evaluator):
    e = run(evaluator, planted.cand("copy_as_relu", planted.COPY_AS_RELU, names=["copy"]))
    assert e.verdict.value == "incorrect" and "widened" in e.reason, e.reason


def test_a_relu_that_drops_nan_fails_the_nan_trial(evaluator):
    """fmaxf(x, 0) turns a NaN into 0 where torch.relu keeps it: right on every finite trial, wrong on the NaN trial;
    the honest relu (a compare and select) passes it, and the kernelbench rule does not run it."""
    e = run(evaluator, planted.cand("drops_nan", planted.DROPS_NAN, names=["relu_fmaxf"]))
    assert e.verdict.value == "incorrect" and "NaN trial" in e.reason and "finite where eager gives NaN" in e.reason, e.reason
    assert e.correctness.nan_trial.startswith("failed")
    ok = run(evaluator, planted.cand("keeps_nan", planted.HONEST))
    assert ok.verdict.value == "correct" and ok.correctness.nan_trial == "passed", (ok.reason, ok.correctness.nan_trial)


@pytest.mark.parametrize("name,src,policy,says", planted.POLICY_CHEATS, ids=[c[0] for c in planted.POLICY_CHEATS])
def test_policy_cheats_rejected_on_the_gpu(evaluator, name, src, policy, says):
    c = planted.cand(name, src)
    c.guard_policy = policy
    e = run(evaluator, c)
    assert e.verdict.value == "rejected" and "host-code policy" in e.reason and says in e.reason, e.reason


@pytest.mark.parametrize("name,src,names,policy,says", [
    ("memo_pointer", planted.MEMO_POINTER, ["relu"], "strict", ("caching", "stale", "off eager", "earlier call", "error",
                                                                 "skipped")),
    ("counts_calls", planted.COUNTS_CALLS, ["relu"], "strict", ("timed call", "NaN", "error")),
    ("caches", planted.CACHES, ["relu"], "strict", ("caching", "earlier call", "error", "skipped")),
    ("returns_input", planted.RETURNS_INPUT, ["relu"], "strict", ("aliases an input",)),
    ("renamed_op", planted.RENAMED_OP, ["noop"], "mixed", ("own kernels skipped",)),
])
def test_dynamic_cheats_rejected(evaluator, name, src, names, policy, says):
    c = planted.cand(name, src, source=planted.RELU + planted.NOOP, names=names)
    c.guard_policy = policy
    e = run(evaluator, c)
    assert e.verdict.value in ("rejected", "incorrect") and any(s in e.reason for s in says), (e.verdict, e.reason)
    after = run(evaluator, planted.cand(f"{name}_then_honest", planted.HONEST))
    assert after.verdict.value == "correct", after.reason  # the worker goes on, baselines untouched
    assert after.eager.median_ms > 0.005


def test_kernelbench_size_fits_with_peak_reported():
    """KernelBench level1/19_ReLU's 6.4 GB input verifies; the evaluation's peak stays within 3x eager's."""
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=None, timeout_s=600, reps=10)
    try:
        e = run(ev, planted.cand("honest_big", planted.HONEST), task=str(TASKS / "relu_kb_size.py"))
    finally:
        ev.close()
    assert e.verdict.value == "correct", e.reason
    ratio = e.peak_bytes / e.eager_peak_bytes
    print(f"peak {e.peak_bytes / 2**30:.1f} GiB, eager {e.eager_peak_bytes / 2**30:.1f} GiB, x{ratio:.2f}; "
          f"timing cost {e.timing_cost_s:.1f} s")
    assert ratio <= 3.0


def test_expert_kernel_past_2_pow_31_elements(tmp_egg):
    from graph.runner import optimize
    from state import Budget
    _, st = optimize(TASKS / "gelu_2g.py", checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"),
                     budget=Budget(candidates_per_stage=1, total_candidates=2), quiet=True, timing_reps=5)
    assert st.result.status == "verified", [(a.candidate_id, a.verdict, a.reason) for a in st.attempts]
    assert "long long" in st.candidate(st.design.best_id).cuda_source
