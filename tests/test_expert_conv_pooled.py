"""A conv summed over its positions after a chain no box sum takes (agents/expert/templates/conv_pooled.py): each
tile's sums by image out of the wgmma conv's epilogue, then a kernel adding them in tile order; run on the CPU
emulator against a float64 truth, and level 2 task 67 planned as it."""
import pytest

from agents.expert import ExpertAgent
from agents.expert.opgraph import Unsupported, export_graph
from agents.expert.templates import conv_pooled
from hardware_profiles import load_profile
from runtime.compile import compile_check
from tasks import load_task
from tests import cpu_emulator
from tests.codegen_golden import KB
from tests.test_expert_conv import _task

CASES = [  # conv spec (as test_expert_conv's), expression: images of 135-144 pixels, tiles across two images
    ((2, 8, 16, 3, 1, 1, 1, 1, True, (3, 8, 9, 15)), "torch.nn.functional.gelu(self.conv(x)).mean(dim=(2, 3))"),
    ((2, 8, 24, 3, 1, 1, 1, 1, True, (3, 8, 11, 13)),
     "torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).flatten(1) * 2.0"),
    ((3, 8, 12, 2, 1, 0, 1, 1, True, (2, 8, 7, 6, 6)),
     "torch.tanh(self.conv(x) * 2.0).sum(dim=(2, 3, 4), keepdim=True) + self.extra"),
    (("T2", 8, 16, 3, 1, 1, 1, 1, False, (2, 8, 12, 12)), "torch.sigmoid(self.conv(x)).mean(dim=(2, 3))"),
]


@pytest.mark.parametrize("case", CASES, ids=["gelu_mean", "adaptive", "conv3d_sum", "T2_mean"])
@pytest.mark.parametrize("knobs", [{"split": 3, "planes": True}, {"split": 3, "planes": True, "BM": 64, "swz": False}],
                         ids=["planes", "planes_bm64"])
def test_the_conv_sums_in_its_epilogue_match_a_float64_truth(tmp_egg, case, knobs):
    """3xTF32 on planes (fp32 grade): a pixel counted twice or missed, a tile's sum put in the wrong image's slot,
    or a lane's channel mixed with another's is off by far more than fp32 rounding."""
    spec, expr = case
    path = _task(tmp_egg, *spec, expr)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), load_profile("h200"))
    assert fam == "conv_pooled", fam
    pk = agent.emit(g, fam, plan, {**agent._default(fam, g, plan, None), **knobs}, load_profile("h200"))
    assert pk.kernel_names[-2:] == ["egg_conv", "egg_conv_pool"]
    assert compile_check(pk.cuda_source, pk.compile_options, "sm_90a").ok
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(path, g, pk, tmp_egg / "emu")
    assert err < 16 * max(eager_err, 2 ** -24), (err, eager_err)


@pytest.mark.parametrize("spec,expr,why", [
    ((2, 8, 16, 3, 1, 1, 1, 1, True, (3, 8, 6, 6)), "torch.relu(self.conv(x)).mean(dim=(2, 3))", "fewer than 128"),
    (("T2", 8, 16, 4, 2, 1, 1, 1, True, (2, 8, 9, 9)), "torch.relu(self.conv(x)).mean(dim=(2, 3))", "by phase"),
    ((2, 8, 16, 3, 1, 1, 1, 1, True, (3, 8, 9, 15)), "torch.relu(self.conv(x)).mean(dim=3)", "sum over its positions"),
])
def test_what_the_sums_do_not_take(tmp_egg, spec, expr, why):
    """Images smaller than a tile (a tile would span three), a conv split by phase (its tiles are not in pixel
    order), a sum over some of the positions."""
    with pytest.raises(Unsupported, match=why):
        conv_pooled.plan_conv_pooled(export_graph(load_task(_task(tmp_egg, *spec, expr))))


@pytest.mark.skipif(not (KB / "level2").exists(), reason="KernelBench not beside the checkout")
def test_kernelbench_67_is_a_conv_with_its_sums():
    agent = ExpertAgent()
    assert agent._plan(str(KB / "level2" / "67_Conv2d_GELU_GlobalAvgPool.py"), load_profile("h200"))[1] == "conv_pooled"
