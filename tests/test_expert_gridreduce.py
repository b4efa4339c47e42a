"""Grid-level reductions (a loss or a norm over a whole tensor, a layer norm over very long rows): the
expert routes them to templates/gridreduce.py; each compiles for sm_90a, and the program of launches,
run on the CPU through tests/cpu_emulator.py, matches PyTorch (small sizes: the template does not
care how long the rows are)."""
import pytest
import torch

from agents.expert import ExpertAgent
from agents.expert.opgraph import export_graph
from agents.expert.templates import gridreduce, rowwise
from tasks import load_task
from tests import cpu_emulator

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}
    def forward(self, {args}):
        return {expr}
def get_inputs():
    return [{inputs}]
def get_init_inputs():
    return []
"""
CASES = [
    ("mse", "pass", "p, t", "torch.mean((p - t) ** 2)", "torch.rand(33, 70), torch.rand(33, 70)"),
    ("hinge", "pass", "p, t", "torch.mean(torch.clamp(1 - p * t, min=0))", "torch.rand(40, 40), torch.rand(40) * 2 - 1"),
    ("frobenius", "pass", "x", "x / torch.norm(x, p='fro')", "torch.randn(12, 9, 13)"),
    ("layernorm", "self.ln = nn.LayerNorm((6, 7, 9))", "x", "self.ln(x)", "torch.randn(3, 6, 7, 9)"),
    # the mean and centred variance in one part/fold pair (Welford), far from zero
    ("layernorm_offset", "self.ln = nn.LayerNorm((6, 7, 9))", "x", "self.ln(x) * 2.0", "torch.randn(3, 6, 7, 9) + 40.0"),
    ("layernorm_rows_of_4", "self.ln = nn.LayerNorm((8, 16))", "x", "self.ln(x) + 1.0", "torch.randn(3, 8, 16) + 5.0"),  # vectors too
    ("variance", "pass", "x", "torch.var(x, dim=1, unbiased=False)", "torch.randn(3, 500) + 7.0"),  # few outputs: two passes
    ("amax", "pass", "x", "torch.amax(x) * 2.0 + 1.0", "torch.randn(50, 41)"),
    ("smooth_l1", "pass", "p, t", "torch.nn.functional.smooth_l1_loss(p, t)", "torch.randn(30, 40), torch.randn(30, 40)"),
    ("smooth_l1_beta", "pass", "p, t", "torch.nn.functional.smooth_l1_loss(p, t, beta=0.5)", "torch.randn(30, 40), torch.randn(30, 40)"),
    ("huber", "pass", "p, t", "torch.nn.functional.huber_loss(p, t, delta=2.0)", "torch.randn(30, 40) * 3, torch.randn(30, 40)"),
    ("l1_sum", "pass", "p, t", "torch.nn.functional.l1_loss(p, t, reduction='sum')", "torch.randn(30, 40), torch.randn(30, 40)"),
    ("kl_batchmean", "pass", "p, t", "torch.nn.functional.kl_div(torch.log(p), t, reduction='batchmean')",
     "torch.rand(16, 50).softmax(dim=-1), torch.rand(16, 50).softmax(dim=-1)"),
]


def _task(tmp_path, name, init, args, expr, inputs):
    p = tmp_path / f"{name}.py"
    p.write_text(TEMPLATE.format(init=init, args=args, expr=expr, inputs=inputs))
    return p


def test_kernelbench_losses_and_norms_route_here():
    from tests.conftest import ROOT
    kb = ROOT.parent / "shared" / "kernelbench" / "level1"
    if not kb.exists():
        pytest.skip("no KernelBench beside the checkout")
    agent = ExpertAgent()
    for t in ("94_MSELoss", "100_HingeLoss", "37_FrobeniusNorm_", "40_LayerNorm", "96_HuberLoss", "98_KLDivLoss"):
        assert agent.precheck(str(kb / f"{t}.py")) is None, t
        assert agent._plan(str(kb / f"{t}.py"))[1] == "grid"


def _emulate(g, plan, loaded, tmp, k: gridreduce.GridKnobs, seed: int = 3):
    """The grid kernels' launches, through the host code a program runs them by (each writing a buffer of
    its own), on the CPU emulator: (got, want) on one input set."""
    from agents.expert import host
    src = gridreduce.render(g, plan, k)
    steps = [(host.Launch(name, grid, block, reads, 0), writes or g.output)
             for name, grid, block, reads, writes in gridreduce.launches(g, plan, k, 2, 256)]
    torch.manual_seed(seed)
    xs = loaded.make_inputs(seed)
    model = loaded.make_model(42)
    want = model(*xs).detach()
    sd = model.state_dict()
    tensors = {f"x{n.index}": xs[n.index] for n in g.inputs} | {f"self.p{n.index}": sd[n.target].detach() for n in g.params}
    got = cpu_emulator.run_host(src, host.module_source_program(g, steps), tensors, tmp / "emu")
    return got.reshape(want.shape), want


@pytest.mark.parametrize("name,init,args,expr,inputs", CASES, ids=[c[0] for c in CASES])
def test_grid_reduction_matches_torch_on_the_cpu(tmp_egg, name, init, args, expr, inputs):
    if not cpu_emulator.available():
        pytest.skip("no g++")
    loaded = load_task(_task(tmp_egg, name, init, args, expr, inputs))
    g = export_graph(loaded)
    plan = rowwise.plan_rows(g, grid_ok=True)
    got, want = _emulate(g, plan, loaded, tmp_egg, gridreduce.GridKnobs(block=64, parts=6, out_waves=1))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()
    if gridreduce.vec_ok(g, plan):  # 16-byte vectors: slices of whole vectors, broadcasts read per element
        got, want = _emulate(g, plan, loaded, tmp_egg, gridreduce.GridKnobs(block=32, parts=5, out_waves=1, vec=4))
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()


def test_welford_pair_saves_a_pass_over_the_rows(tmp_egg):
    p = _task(tmp_egg, "ln", "self.ln = nn.LayerNorm((6, 7, 9))", "x", "self.ln(x)", "torch.randn(3, 6, 7, 9)")
    g = export_graph(load_task(p))
    plan = rowwise.plan_rows(g, grid_ok=True)
    on, off = gridreduce.GridKnobs(), gridreduce.GridKnobs(welford=False)
    assert gridreduce.kernel_names(g, plan, on) == ["egg_grid_part0", "egg_grid_fold0", "egg_grid_out"]
    assert len(gridreduce.kernel_names(g, plan, off)) == 5
    written = [w for *_, w in gridreduce.launches(g, plan, on, 132, 2048)]
    assert written[-1] is None and written[0].shape[0] == 3 * gridreduce.parts_per_row(plan, on) * 3
    assert written[1].shape == (2 * 3,)  # the row's sum and centred sum of squares, a row each


BN_LONG = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(5)
    def forward(self, x, z):
        return torch.relu(self.bn(x * 2.0 - 0.5) + z) * 1.5
def get_inputs():
    return [torch.randn(3, 5, 7, 13) * 2.0 + 4.0, torch.randn(3, 5, 7, 13)]
def get_init_inputs():
    return []
"""


def test_a_batchnorm_channel_too_long_for_a_block_is_a_grid_reduction(tmp_egg, monkeypatch):
    """A trained BatchNorm whose channel (batch and positions) exceeds what a block caches: one segmented
    row a channel split over blocks, mean and variance in one Welford read, the normalize with the
    residual add and ReLU in the output pass (three launches, the input read twice, where the split over
    (2, 3) then 0 took five and read it three times). The cap lowered so the emulator runs it small;
    7x13 segments (not a power of two) three apart."""
    from agents.expert import ExpertAgent, opgraph
    if not cpu_emulator.available():
        pytest.skip("no g++")
    monkeypatch.setattr(opgraph, "SEGMENTED_ROW_MAX", 64)
    p = tmp_egg / "bn_long.py"
    p.write_text(BN_LONG)
    loaded = load_task(p)
    g, fam, plan = ExpertAgent()._plan(str(p))
    assert fam == "grid" and plan.seg == 91 and plan.inner == 5 and plan.R == 273 and plan.dims == (0, 2, 3)
    assert gridreduce.rows(plan) == 5
    for k in (gridreduce.GridKnobs(block=64, parts=15, out_waves=1), gridreduce.GridKnobs(block=32, parts=5, welford=False)):
        got, want = _emulate(g, plan, loaded, tmp_egg, k)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    assert not gridreduce.vec_ok(g, plan)  # runs of 91: a vector would span two
    # runs of 8 x 12 = 96 (KernelBench 33's are 512 x 512): 16-byte vectors in both reads and the output pass
    p.write_text(BN_LONG.replace("3, 5, 7, 13", "3, 5, 8, 12"))
    loaded = load_task(p)
    g, fam, plan = ExpertAgent()._plan(str(p))
    assert fam == "grid" and plan.seg == 96 and gridreduce.vec_ok(g, plan)
    for k in (gridreduce.GridKnobs(block=32, parts=7, out_waves=1, vec=4), gridreduce.GridKnobs(block=64, parts=3, welford=False, vec=4)):
        assert "float4" in gridreduce.render(g, plan, k)
        got, want = _emulate(g, plan, loaded, tmp_egg, k)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (k, (got - want).abs().max())


@pytest.mark.parametrize("expr,divisor,keep", [("torch.var(x, dim=1, unbiased=False)", 40.0, False),
                                               ("torch.var(x, 1, True, True)", 39.0, True),
                                               ("torch.std(x, dim=1, correction=0)", 40.0, False),
                                               ("torch.var(x, dim=1)", 39.0, False)])
def test_variance_reads_unbiased_however_it_is_passed(tmp_egg, expr, divisor, keep):
    """aten.var.dim takes `unbiased` positionally (torch.var(x, 1, unbiased=False) exports that way);
    aten.var.correction as a keyword."""
    p = _task(tmp_egg, "v", "pass", "x", expr, "torch.randn(5, 40)")
    g = export_graph(load_task(p))
    last_div = [n for n in g.nodes if n.kind == "pw" and n.op == "div"][-1]
    assert last_div.args[1] == divisor
    assert tuple(g.output.shape) == ((5, 1) if keep else (5,))


def test_memory_optimization_measures_the_two_pass_variance(tmp_egg):
    """A grid-level norm's first candidate computes mean and variance in one Welford read, its passes in
    16-byte vectors (rows of 1025 x 1024 floats); memory optimization offers the two-read variance beside it
    (a divide an element may cost more than a read at memory speed), then the scalar passes."""
    from agents.expert import ExpertAgent
    from state import KernelCandidate
    from tests.test_expert import request
    agent = ExpertAgent()
    for name, init, expr, want in (("ln", "self.ln = nn.LayerNorm((1025, 1024))", "self.ln(x)", [(False, 4), (True, 1)]),
                                   ("fro", "pass", "x / torch.norm(x, p='fro')", [(True, 1)])):
        p = _task(tmp_egg, name, init, "x", expr, "torch.randn(2, 1025, 1024)")  # rows over 2^20: grid-level
        first = agent.propose(request(p)).kernels[0]
        assert first.params["family"] == "grid" and first.params.get("welford", True) and first.params["vec"] == 4
        assert "16-byte vectors" in first.description and "assert x0.data_ptr() % 16 == 0" in first.host_code
        best = KernelCandidate(id="a", stage="tiling", **first.model_dump())
        mem = agent.propose(request(p, "memory_optimization", best)).kernels
        assert [(k.params.get("welford", True), k.params["vec"]) for k in mem] == want
        assert all(k.cuda_source.count("egg_grid_part") == (1 if k.params.get("welford", True) else 2) for k in mem)
