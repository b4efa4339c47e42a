"""Swizzled shared tiles need a 1024-byte boundary, and a kernel with static shared memory gets its dynamic memory where
the driver puts it (RegNet's conv_stats conv on the H100: benchmarks/NOTES.md, twenty-fourth session). The emulator
places such a kernel's dynamic memory off the boundary; the conv ring moves itself back to it."""
import pytest

from agents.expert import ExpertAgent
from agents.expert.templates import conv
from agents.expert.templates.gemm import GemmKnobs
from agents.expert.templates.gemm_tf32 import SWIZZLE_PAD, smem_base
from hardware_profiles import load_profile
from tests import cpu_emulator

PROBE = """
extern "C" __global__ void __launch_bounds__(32) egg_base(float* __restrict__ out) {
    __shared__ float st[5];
%s
    if (threadIdx.x == 0) {
        st[0] = 2.0f;
        out[0] = (float)((unsigned)__cvta_generic_to_shared(smem_raw) & 1023u);
        out[1] = (float)((unsigned)__cvta_generic_to_shared(smem) & 1023u);
        out[2] = st[0];
    }
}
"""


def test_the_emulator_places_dynamic_memory_after_static_off_the_boundary_and_the_ring_realigns(tmp_egg):
    if not cpu_emulator.available():
        pytest.skip("no g++")
    got = cpu_emulator.run(PROBE % smem_base(True), "egg_base", 1, 32, (3,), [], tmp_egg / "emu")
    assert got[0] == cpu_emulator.MISPLACED_DYNAMIC_BASE % 1024 and got[0] != 0  # where the driver may put it
    assert got[1] == 0 and got[2] == 2.0  # the swizzled ring's own start: on the boundary
    assert cpu_emulator.dynamic_base(PROBE.replace("__shared__ float st[5];", ""), "egg_base") == 0


def test_a_swizzled_conv_ring_asks_for_the_bytes_it_realigns_into(tmp_egg):
    from tests.test_expert_conv_stats import _path
    p = _path(tmp_egg, "nn.Conv2d(64, 128, 3, padding=1)", 2, 128, "8, 64, 112, 112", "torch.relu(self.bn(self.conv(x)))")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p), load_profile("h100_sxm"))
    d = agent._default(fam, g, plan, None)
    assert fam == "conv_stats" and d["swz"]
    pk = agent.emit(g, fam, plan, d, load_profile("h100_sxm"))
    assert "smem_raw + ((1024u - " in pk.cuda_source and "__shared__ float st_red" in pk.cuda_source
    k = GemmKnobs.of(d)
    plain = GemmKnobs.of({**d, "swz": False})
    assert conv.shared_bytes(plan.conv, k, "nhwc") == conv.shared_bytes(plan.conv, plain, "nhwc") + SWIZZLE_PAD
