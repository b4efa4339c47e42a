"""A conv and a training-mode BatchNorm (agents/expert/templates/conv_stats.py): the batch statistics of each channel
from the wgmma conv's epilogue (tile sums, then squared deviations around the tile's mean), combined in a fixed
order, then applied in one pass; run on the CPU emulator against a float64 truth, and level 2 tasks 52 and 73
planned as it."""
import pytest

from agents.expert import ExpertAgent
from agents.expert.opgraph import Unsupported, export_graph
from agents.expert.templates import conv_stats
from hardware_profiles import load_profile
from tasks import load_task
from tests import cpu_emulator
from tests.codegen_golden import KB

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {conv}
        self.bn = nn.BatchNorm{nd}d({cout})
        nn.init.uniform_(self.bn.weight, 0.5, 1.5)
        nn.init.uniform_(self.bn.bias, -0.5, 0.5)
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.randn({shape})]
def get_init_inputs():
    return []
"""
CASES = [  # conv module, BatchNorm dims, channels, input shape, expression
    ("nn.Conv2d(8, 16, 3, padding=1)", 2, 16, "3, 8, 9, 15", "self.bn(self.conv(x)) * 2.0"),
    ("nn.Conv2d(8, 24, 3)", 2, 24, "2, 8, 11, 13", "self.bn(torch.relu(self.conv(x)) + 0.5)"),
    ("nn.ConvTranspose2d(8, 16, 4, stride=2, padding=1)", 2, 16, "2, 8, 5, 6", "torch.sigmoid(self.bn(self.conv(x)))"),
    ("nn.Conv3d(8, 12, 2)", 3, 12, "2, 8, 5, 4, 6", "self.bn(self.conv(x)) - 1.0"),
]


def _path(tmp, conv, nd, cout, shape, expr):
    p = tmp / "bn.py"
    p.write_text(TEMPLATE.format(conv=conv, nd=nd, cout=cout, shape=shape, expr=expr))
    return p


@pytest.mark.parametrize("case", CASES, ids=["scale", "relu_shift", "T2_phased", "conv3d"])
@pytest.mark.parametrize("knobs", [{"split": 3, "planes": True}, {"split": 3, "planes": True, "BM": 64, "swz": False}],
                         ids=["planes", "planes_bm64"])
def test_batch_statistics_from_the_epilogue_match_a_float64_truth(tmp_egg, case, knobs):
    """fp32 grade (3xTF32 on planes): a pixel missed or counted twice, a tile's count or mean wrong, or the tiles
    combined wrongly moves the mean or the variance by far more than fp32 rounding."""
    path = _path(tmp_egg, *case)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), load_profile("h200"))
    assert fam == "conv_stats", fam
    pk = agent.emit(g, fam, plan, {**agent._default(fam, g, plan, None), **knobs}, load_profile("h200"))
    assert pk.kernel_names[-3:] == ["egg_conv", "egg_conv_stats", "egg_conv_apply"]
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu")


def test_an_eval_batchnorm_or_another_reduction_is_not_this(tmp_egg):
    """Running statistics (eval mode) are an affine step the conv family fuses; a variance of another form is not
    the batch norm's."""
    p = _path(tmp_egg, "nn.Conv2d(8, 16, 3)", 2, 16, "2, 8, 9, 9", "self.conv(x).var(dim=(0, 2, 3), keepdim=True) + self.conv(x)")
    with pytest.raises(Unsupported):
        conv_stats.plan_conv_stats(export_graph(load_task(p)))
    agent = ExpertAgent()
    assert agent._plan(str(_path(tmp_egg, "nn.Conv2d(8, 16, 3)", 2, 16, "2, 8, 9, 9", "self.bn.eval()(self.conv(x))")),
                       load_profile("h200"))[1] == "conv"


@pytest.mark.skipif(not (KB / "level2").exists(), reason="KernelBench not beside the checkout")
def test_kernelbench_conv_batchnorm_tasks_take_the_statistics_from_the_epilogue():
    """Task 73 (3 input channels) takes its statistics from the conv's epilogue; task 52 (64 -> 128 channels, a
    forward conv the TMA conv takes first) is the program of the TMA conv and the BatchNorm's passes."""
    from tests.test_expert import request
    agent = ExpertAgent()
    assert agent._plan(str(KB / "level2" / "73_Conv2d_BatchNorm_Scaling.py"), load_profile("h200"))[1] == "conv_stats"
    g, fam, plan = agent._plan(str(KB / "level2" / "52_Conv2d_Activation_BatchNorm.py"), load_profile("h200"))
    assert fam == "program" and plan.stages()[0][1] == "conv"
    first = agent.propose(request(KB / "level2" / "52_Conv2d_Activation_BatchNorm.py")).kernels[0]  # algorithm design's
    assert first.params["tma"] and first.params["persist"] and "egg_conv_apply" not in first.kernel_names


def test_as_a_programs_first_kernel(tmp_egg):
    """Level 2 task 15's shape of graph: the conv and its BatchNorm first (the planner's preferred cut), the mean over
    the positions subtracted by the next kernel, which reads the applied output."""
    path = _path(tmp_egg, "nn.ConvTranspose2d(8, 16, 4, stride=2, padding=1)", 2, 16, "2, 8, 5, 6",
                 "(lambda y: y - y.mean(dim=(2, 3), keepdim=True))(self.bn(self.conv(x)))")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), load_profile("h200"))
    assert fam == "program" and [f for _, f, _, _ in plan.stages()] == ["conv_stats", "rows"]
    sg, sfam, splan, _ = plan.stages()[0]
    pk = agent.emit(g, fam, plan, {**agent._default(sfam, sg, splan, None), "split": 3, "planes": True}, load_profile("h200"))
    assert "egg_conv_apply" in pk.kernel_names
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu", compiled=False)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[3]], ids=["scale", "relu_shift", "conv3d"])
@pytest.mark.parametrize("knobs", [{"BM": 128, "BN": 64, "WM": 2, "WN": 4}, {"BM": 64, "BN": 16, "WM": 4, "WN": 2}],
                         ids=["bm128", "bm64_bn16"])
def test_batch_statistics_on_the_whole_k_kernel_match_a_float64_truth(tmp_egg, case, knobs):
    """The same statistics from the whole-K persistent kernel's tiles (conv_short, 3xTF32 mma.sync): a column's rows
    meet across the warp rows; with 16-wide channel tiles (bn16: two or more a conv) each tile's blocks write their
    channels of the same slot. A row missed, a warp row dropped or a channel at the wrong place moves the mean or
    the variance far past fp32 rounding."""
    path = _path(tmp_egg, *case)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), load_profile("h200"))
    assert fam == "conv_stats", fam
    pk = agent.emit(g, fam, plan, {"family": fam, "layout": "nhwc", "split": 3, "whole": True, **knobs}, load_profile("h200"))
    assert "whole K" in pk.description and pk.kernel_names[-3:] == ["egg_conv", "egg_conv_stats", "egg_conv_apply"]
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu")


def test_a_3d_phased_conv_keeps_its_batch_statistics_in_a_program_unless_a_probe_lifts_it(tmp_egg, monkeypatch):
    """Level 2 task 15's shape of conv (ConvTranspose3d k3 s2): conv_stats declines it (NaN on the GPU, cause not found),
    so the task plans as a program; with the refusal lifted (nan_probe --stats-3d-phased) the design is conv_stats again
    and matches float64 on the emulator, which is why the GPU's failure is not an indexing error it could show."""
    path = _path(tmp_egg, "nn.ConvTranspose3d(8, 16, 3, stride=2, padding=1)", 3, 16, "2, 8, 3, 4, 5", "self.bn(self.conv(x)) - 1.0")
    agent = ExpertAgent()
    g = export_graph(load_task(path))
    with pytest.raises(Unsupported, match="3-d transposed conv by phase"):
        conv_stats.plan_conv_stats(g)
    monkeypatch.setattr(conv_stats, "DECLINE_3D_PHASED", False)
    g, fam, plan = agent._plan(str(path), load_profile("h200"))
    assert fam == "conv_stats"
    pk = agent.emit(g, fam, plan, {**agent._default(fam, g, plan, None), "split": 3, "planes": True}, load_profile("h200"))
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu")


def test_a_short_k_conv_with_its_batch_norm_starts_on_the_whole_k_kernel(tmp_egg):
    """K 72 (task 73's conv: 3x3 over 8 channels): the whole-K design first, the ring's after; a transposed conv starts
    on the ring."""
    from tests.test_expert import request
    agent = ExpertAgent()
    ks = agent.propose(request(_path(tmp_egg, *CASES[0]))).kernels
    assert ks[0].params.get("whole") and ks[0].params["family"] == "conv_stats"
    assert any(k.params.get("wgmma") for k in ks[1:])
    ks = agent.propose(request(_path(tmp_egg, *CASES[2]))).kernels
    assert not any(k.params.get("whole") for k in ks) and ks[0].params.get("wgmma")
