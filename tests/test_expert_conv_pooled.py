"""A conv summed over its positions after a chain no box sum takes (agents/expert/templates/conv_pooled.py): each
tile's sums by image out of the wgmma conv's epilogue, then a kernel adding them in tile order; run on the CPU
emulator against a float64 truth, and level 2 task 67 planned as it."""
import pytest

from agents.expert import ExpertAgent
from agents.expert.opgraph import Unsupported, export_graph
from agents.expert.templates import conv_pooled
from hardware_profiles import load_profile
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
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu")


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


@pytest.mark.parametrize("cout,planes,bm", [(64, True, 64), (64, False, 128), (128, True, 128)])
def test_the_first_tile_is_the_one_two_blocks_an_sm_can_hold(cout, planes, bm, tmp_egg):
    """Task 67's conv on 3xTF32 planes (64 channels): the 128-pixel ring (147 KB) leaves one block an SM, nothing
    overlapping a tile's loads, MMAs and epilogue; 64 pixels fit two (measured on the H100: its conv 4.03 -> 3.63 ms).
    Plain TF32 fits two at 128; at 128 channels the planes' ring fits one at either height (task 91 lost at 64)."""
    from agents.expert.agent import blocks_per_sm, epilogue_tile
    prof = load_profile("h100_sxm")
    path = _task(tmp_egg, 2, 8, cout, 3, 1, 1, 1, 1, True, (3, 8, 9, 15), "torch.nn.functional.gelu(self.conv(x)).mean(dim=(2, 3))")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), prof)
    d = {**agent._default(fam, g, plan, None), **({"split": 3, "planes": True} if planes else {})}
    got = epilogue_tile(fam, plan, d, prof)
    assert got["BM"] == bm
    assert blocks_per_sm(fam, plan, got, prof) >= (2 if bm == 64 or not planes else 1)
    if bm == 64:
        assert blocks_per_sm(fam, plan, d, prof) == 1
    agent.emit(g, fam, plan, got, prof)  # the chosen tile renders and fits


@pytest.mark.parametrize("case", CASES[:3], ids=["gelu_mean", "adaptive", "conv3d_sum"])
@pytest.mark.parametrize("knobs", [{"BM": 128, "WM": 2, "WN": 4}, {"BM": 64, "WM": 4, "WN": 2}], ids=["bm128", "bm64"])
def test_the_sums_on_the_whole_k_kernel_match_a_float64_truth(tmp_egg, case, knobs):
    """The same sums from the whole-K persistent kernel's tiles (conv_short, 3xTF32 mma.sync): a warp holds part of a
    tile's columns, so a column's rows meet across the warp rows in shared memory; a tile on a warp's slot of another
    tile, or a channel tile's columns put at the wrong channel, is off by far more than fp32 rounding."""
    spec, expr = case
    path = _task(tmp_egg, *spec, expr)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), load_profile("h200"))
    params = {"family": fam, "layout": "nhwc", "split": 3, "whole": True, "BN": 64, **knobs}
    pk = agent.emit(g, fam, plan, params, load_profile("h200"))
    assert "whole K" in pk.description and pk.kernel_names[-2:] == ["egg_conv", "egg_conv_pool"]
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu")


def test_a_short_k_conv_sum_starts_on_the_whole_k_kernel(tmp_egg):
    """K 72 (3x3 over 8 channels, task 67's): the whole-K design first, the wgmma ring's after it; a transposed conv
    (no whole-K kernel) starts on the ring."""
    from tests.test_expert import request
    agent = ExpertAgent()
    spec, expr = CASES[0]
    ks = agent.propose(request(_task(tmp_egg, *spec, expr))).kernels
    assert ks[0].params.get("whole") and ks[0].params["family"] == "conv_pooled"
    assert any(k.params.get("wgmma") for k in ks[1:])
    spec, expr = CASES[3]
    ks = agent.propose(request(_task(tmp_egg, *spec, expr))).kernels
    assert not any(k.params.get("whole") for k in ks) and ks[0].params.get("wgmma")
