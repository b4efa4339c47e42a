"""A conv whose channels are reduced right after it (agents/expert/templates/conv_rows.py): the reductions in
the warpgroup-MMA conv's epilogue (each thread's columns, then the quad's by shuffles), run on the CPU emulator
against a float64 truth; level 2's such tasks planned as one kernel (or that kernel first) and compiled for sm_90a."""
import pytest

from agents.expert import ExpertAgent
from agents.expert.templates import conv_rows
from hardware_profiles import load_profile
from tests import cpu_emulator
from tests.codegen_golden import KB
from tests.test_expert_conv import _task

CASES = [  # conv spec (as test_expert_conv's), expression, reductions, full output
    ((2, 8, 16, 3, 1, 1, 1, 1, True, (2, 8, 9, 7)), "torch.min(self.conv(x) * 2.0, dim=1, keepdim=True)[0]",
     ["amin"], False),
    # a phased transposed conv (stride 2), softmax then a per-channel bias and a sigmoid: every element stored
    (("T2", 8, 16, 4, 2, 1, 1, 1, True, (2, 8, 5, 6)), "torch.sigmoid(torch.softmax(self.conv(x), dim=1) + self.extra)",
     ["amax", "sum"], True),
    # 12 channels in a 32-wide tile (columns past the channels masked), logsumexp then steps on one value a pixel
    (("T3", 8, 12, 3, 2, 1, 1, 1, False, (1, 8, 3, 4, 3)),
     "torch.clamp(torch.logsumexp(self.conv(x), dim=1, keepdim=True) - 0.5, min=-1.0, max=8.0)", ["amax", "sum"], False),
    # the mean without keepdim: an output of (N, H, W)
    ((2, 8, 24, 3, 1, 1, 1, 1, True, (3, 8, 7, 9)), "torch.tanh(self.conv(x).mean(dim=1))", ["sum"], False),
]


def _emitted(tmp_egg, spec, expr, **knobs):
    path = _task(tmp_egg, *spec, expr)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path))
    assert fam == "conv_rows", fam
    params = {**agent._default(fam, g, plan, None), **knobs}
    return path, g, plan, agent.emit(g, fam, plan, params, load_profile("h200"))


@pytest.mark.parametrize("case", CASES, ids=["min", "softmax_T2", "logsumexp_T3", "mean"])
@pytest.mark.parametrize("knobs", [{"split": 3, "planes": True}, {"split": 3, "planes": True, "BM": 64, "swz": False}],
                         ids=["planes", "planes_bm64"])
def test_channel_reductions_in_the_conv_epilogue_match_a_float64_truth(tmp_egg, case, knobs):
    """3xTF32 on planes, so the fused kernel is held to fp32 grade: a wrong pixel, channel or reduction is off by
    orders of magnitude; rows past a phase's pixels and columns past the channels must not count."""
    spec, expr, ops, full = case
    path, g, plan, pk = _emitted(tmp_egg, spec, expr, **knobs)
    assert [r.op for r in plan.reduces] == ops and plan.full_output == full
    assert pk.cuda_source.count("__shfl_xor_sync") == 4 * len(ops)  # two lanes x two rows a reduction
    cpu_emulator.assert_fp32_grade(path, g, pk, tmp_egg / "emu")


def test_plain_tf32_epilogue_is_within_tf32(tmp_egg):
    spec, expr, _, _ = CASES[1]
    path, g, plan, pk = _emitted(tmp_egg, spec, expr)
    assert "TF32 wgmma" in pk.description and "planes" not in pk.description
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(path, g, pk, tmp_egg / "emu")
    assert err < 2e-3, (err, eager_err)


@pytest.mark.parametrize("expr,why", [
    ("torch.min(self.conv(x), dim=2, keepdim=True)[0]", "no reduction over a convolution's channels"),
    ("torch.softmax(self.conv(x), dim=1) + self.conv(x).mean(dim=1, keepdim=True)", "reads the channels"),
])
def test_what_the_epilogue_does_not_take(tmp_egg, expr, why):
    """A reduction over another dim, or a per-pixel output that also reads every channel unreduced, stays a program."""
    from agents.expert.opgraph import Unsupported, export_graph
    from tasks import load_task
    path = _task(tmp_egg, 2, 8, 16, 3, 1, 1, 1, 1, True, (2, 8, 9, 7), expr)
    with pytest.raises(Unsupported):
        conv_rows.plan_conv_rows(export_graph(load_task(path)))


def test_wgmma_less_gpus_keep_the_program(tmp_egg):
    """Without the warpgroup MMA the conv and its reduction stay two kernels (a profile the epilogue cannot run on)."""
    from agents.expert.templates.conv import plan_conv  # noqa: F401 (the conv family stays plannable)
    spec, expr, _, _ = CASES[0]
    path = _task(tmp_egg, *spec, expr)
    agent = ExpertAgent()
    assert agent._plan(str(path), load_profile("h200"))[1] == "conv_rows"
    assert agent._plan(str(path), load_profile("a100_80gb"))[1] == "program"


@pytest.mark.skipif(not (KB / "level2").exists(), reason="KernelBench not beside the checkout")
@pytest.mark.parametrize("task,first", [("25_Conv2d_Min_Tanh_Tanh", "conv_rows"), ("32_Conv2d_Scaling_Min", "conv_rows"),
                                        ("36_ConvTranspose2d_Min_Sum_GELU_Add", "program"),
                                        ("58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp", "conv_rows"),
                                        ("91_ConvTranspose2d_Softmax_BiasAdd_Scaling_Sigmoid", "conv_rows")])
def test_kernelbench_channel_reductions_plan_into_the_epilogue(task, first):
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(KB / "level2" / f"{task}.py"), load_profile("h200"))
    assert fam == first
    if fam == "program":  # the conv and its min first, the sum over the height after
        assert plan.stages()[0][1] == "conv_rows"


def test_a_few_channel_conv_keeps_its_own_design(tmp_egg):
    """3 input channels, not phased: the conv family's first design is the direct conv (level 2 task 6), which the
    fused epilogue (on the channels-last implicit GEMM) would replace with a slower conv."""
    from agents.expert.opgraph import Unsupported, export_graph
    from tasks import load_task
    path = _task(tmp_egg, 2, 3, 16, 3, 1, 1, 1, 1, True, (2, 3, 9, 7), "torch.softmax(self.conv(x), dim=1)")
    with pytest.raises(Unsupported, match="does not take first"):
        conv_rows.plan_conv_rows(export_graph(load_task(path)))
