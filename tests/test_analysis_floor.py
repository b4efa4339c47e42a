"""The roofline floor is a bound no kernel beats: fp32 matmuls and convolutions can run on tensor cores
(3xTF32, or TF32 where eager's cuDNN does), so their FLOPs sit at the TF32 peak, and the rest at fp32's.
A floor at the SIMT peak flagged correct conv kernels (and eager itself) as "faster than the floor"."""
import pytest

from hardware_profiles import load_profile
from runtime.analysis import analyze
from tasks import load_task
from tests.test_expert_tf32 import TEMPLATE

H200 = load_profile("h200")


def _floor(tmp_egg, expr, sa, sb, dtype=""):
    p = tmp_egg / "t.py"
    src = TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)) + dtype, sb=", ".join(map(str, sb)) + dtype)
    p.write_text(src)
    return analyze(load_task(p), H200)


def test_an_fp32_matmul_floor_is_at_the_tf32_peak(tmp_egg):
    n = 4096
    a = _floor(tmp_egg, "torch.matmul(a, b)", (n, n), (n, n))
    assert a.roofline.bound == "compute"
    assert a.roofline.floor_ms == pytest.approx(2 * n ** 3 / (495e12) * 1e3, rel=1e-3)
    assert any("TF32" in note for note in a.notes)


def test_elementwise_flops_stay_at_the_fp32_rate_and_bf16_at_its_own(tmp_egg):
    n = 4096
    a = _floor(tmp_egg, "torch.matmul(a, b)", (n, n), (n, n), ", dtype=torch.bfloat16")
    assert a.roofline.floor_ms == pytest.approx(2 * n ** 3 / 750e12 * 1e3, rel=1e-3)
    m = _floor(tmp_egg, "torch.relu(a) + b", (n, n), (n, n))
    assert m.roofline.bound == "memory" and not any("TF32" in note for note in m.notes)
