"""Instance and group norm (KernelBench 34, 35) lowered onto row programs: a group is a contiguous
(N, G, C/G, ...) view, the affine weight and bias per channel. Run on the CPU through
tests/cpu_emulator.py against PyTorch, for the plain, shared-memory and register-cached variants."""
from types import SimpleNamespace

import pytest
import torch

from agents.expert.opgraph import Unsupported, export_graph
from agents.expert.templates import rowwise
from tasks import load_task
from tests import cpu_emulator

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = {module}
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.randn({shape})]
def get_init_inputs():
    return []
"""
CASES = [
    ("instance", "nn.InstanceNorm2d(6)", "self.norm(x)", "2, 6, 9, 11"),
    ("instance_affine", "nn.InstanceNorm2d(6, affine=True)", "torch.relu(self.norm(x))", "2, 6, 9, 11"),
    ("group", "nn.GroupNorm(3, 6)", "self.norm(x)", "2, 6, 9, 11"),
    ("group_1d", "nn.GroupNorm(2, 8)", "self.norm(x) * 2.0", "3, 8, 40"),
]


@pytest.mark.parametrize("name,module,expr,shape", CASES, ids=[c[0] for c in CASES])
def test_norm_rows_match_torch_on_the_cpu(tmp_egg, name, module, expr, shape):
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p = tmp_egg / f"{name}.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    loaded = load_task(p)
    g = export_graph(loaded)
    plan = rowwise.plan_rows(g)
    assert plan.full_output and plan.inner == 1
    model = loaded.make_model(42)
    with torch.no_grad():  # a non-trivial affine
        for prm in model.parameters():
            prm.copy_(torch.randn_like(prm))
    torch.manual_seed(4)
    x = torch.randn(*[int(s) for s in shape.split(",")])
    want = model(x).detach()
    sd = model.state_dict()
    params = [sd[n.target] for n in g.params]
    for cache, block in (("none", 64), ("smem", 64), ("regs", 128)):
        k = rowwise.RowKnobs(mapping="block", block=block, cache=cache, waves=1)
        src = rowwise.render(g, plan, k)
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(want.shape), [x, *params],
                               tmp_egg / f"emu_{cache}")
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (cache, (got - want).abs().max())


@pytest.mark.parametrize("module,expr,shape,offset", [
    ("nn.LayerNorm(300)", "self.norm(x)", "5, 300", 0.0),
    ("nn.GroupNorm(2, 8)", "self.norm(x)", "3, 8, 70", 100.0),  # a mean far from zero: the centring must be exact
    ("nn.InstanceNorm2d(4)", "self.norm(x) * 2.0", "2, 4, 11, 13", 3.0),
])
def test_welford_one_pass_matches_a_float64_truth(tmp_egg, module, expr, shape, offset):
    """The mean and the centred variance in one pass (Welford per thread, Chan across lanes and warps),
    for each mapping, at least as accurate as the two passes it replaces."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p = tmp_egg / "n.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    loaded = load_task(p)
    g = export_graph(loaded)
    plan = rowwise.plan_rows(g)
    assert rowwise.welford_pairs(plan) == {0: 1}
    model = loaded.make_model(42)
    torch.manual_seed(4)
    x = torch.randn(*[int(s) for s in shape.split(",")]) + offset
    truth = model.double()(x.double()).detach()
    params = [model.float().state_dict()[n.target] for n in g.params]
    errs = {}
    for mapping, block, welford in (("block", 64, True), ("warp", 64, True), ("thread", 32, True), ("block", 64, False)):
        k = rowwise.RowKnobs(mapping=mapping, block=block, waves=1, welford=welford)
        src = rowwise.render(g, plan, k)
        assert ("wc0" in src) == welford and src.count("for (long long r = ") == (2 if welford else 3)
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x, *params],
                               tmp_egg / f"emu_{mapping}_{welford}").double()
        errs[(mapping, welford)] = float((got - truth).abs().max() / truth.abs().max())
    assert max(errs.values()) < 2e-5, errs
    assert errs[("block", True)] <= 4 * errs[("block", False)] + 1e-7, errs


@pytest.mark.parametrize("expr,shape,loops", [
    ("x * x.sum(1, keepdim=True) / (x * x).sum(1, keepdim=True)", "5, 300", 2),  # two sums: one pass, then the output
    ("x / (x - x.mean(1, keepdim=True)).abs().sum(1, keepdim=True)", "5, 300", 3),  # the second reads the first's result
])
def test_sibling_reductions_share_a_pass_over_the_row(tmp_egg, expr, shape, loops):
    """Reductions none of which reads another's result run in one loop over the row (a triplet loss's two
    distances read the anchor once); one that needs an earlier result keeps its own pass. Each mapping
    against a float64 truth."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager = _rows_case(tmp_egg, "sib", "nn.Identity()", expr, shape, 3, lambda s: torch.randn(*s) + 1.0)
    assert rowwise.sibling_runs(plan, [0, 1]) == ({0: [0, 1]} if loops == 2 else {})
    for mapping, block in (("block", 64), ("warp", 64), ("thread", 32)):
        k = rowwise.RowKnobs(mapping=mapping, block=block, waves=1)
        src = rowwise.render(g, plan, k)
        assert src.count("for (long long r = ") == loops, (mapping, src)
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x, *params],
                               tmp_egg / f"emu_{mapping}").double()
        assert _rel_err(got, truth) <= 32 * max(eager, 2 ** -24), (mapping, _rel_err(got, truth), eager)


def _rows_case(tmp, name, module, expr, shape, seed, make_x):
    """A row task written out and planned, with its input (`make_x(shape)` after seeding torch with
    `seed`), parameters, float64 truth and eager fp32's error (relative to the truth's largest magnitude)."""
    p = tmp / f"{name}.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    loaded = load_task(p)
    g = export_graph(loaded)
    plan = rowwise.plan_rows(g)
    model = loaded.make_model(42)
    torch.manual_seed(seed)
    x = make_x([int(s) for s in shape.split(",")])
    truth = model.double()(x.double()).detach()
    want = model.float()(x).detach().double()
    params = [model.float().state_dict()[n.target] for n in g.params]
    return g, plan, x, params, truth, _rel_err(want, truth)


def _rel_err(got, truth) -> float:
    return float((got.double() - truth).abs().max() / truth.abs().max())


@pytest.mark.parametrize("expr,shape,offset", [
    ("torch.softmax(x, dim=1)", "5, 300", 0.0),
    ("torch.log_softmax(x, dim=1)", "4, 257", 50.0),  # far from zero: the running max must rescale exactly
    ("torch.logsumexp(x, dim=1) * 2.0", "6, 100", 0.0),
    ("torch.softmax(x, dim=2)", "2, 3, 70", -20.0),
    ("torch.softmax(x, dim=1)", "2, 40, 5", 0.0),  # over a middle dim: rows strided by 5
])
def test_online_softmax_one_pass_matches_a_float64_truth(tmp_egg, expr, shape, offset):
    """Softmax, log-softmax and logsumexp (KernelBench 23, 24): the max and the sum of exp(x - max) in
    one pass (a running max that rescales the sum; lanes and warps merged the same way), then the
    write pass: two reads of the row instead of three, judged against float64 for every mapping."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    def make_x(dims):
        x = torch.randn(*dims) * 3.0 + offset
        x.view(-1)[::7] -= 40.0  # some elements far below the max: their exps underflow in the sum
        return x
    g, plan, x, _, truth, eager_err = _rows_case(tmp_egg, "sm", "nn.Identity()", expr, shape, 4, make_x)
    assert rowwise.online_pairs(plan) == {0: 1}
    passes = 2 if plan.full_output else 1
    for mapping, block, online in (("block", 64, True), ("warp", 64, True), ("thread", 32, True), ("block", 64, False)):
        k = rowwise.RowKnobs(mapping=mapping, block=block, waves=1, online=online)
        src = rowwise.render(g, plan, k)
        assert ("om0" in src) == online and src.count("for (long long r = ") == passes + (0 if online else 1)
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x],
                               tmp_egg / f"emu_{mapping}_{online}")
        err = _rel_err(got, truth)
        assert err < 8 * max(eager_err, 2 ** -24), (mapping, online, err, eager_err)


@pytest.mark.parametrize("module,expr,shape,C", [
    ("nn.Identity()", "torch.softmax(x, dim=1)", "3, 300", 4),  # online pair; 16-byte staging
    ("nn.Identity()", "torch.log_softmax(x, dim=1) * 2.0", "2, 257", 2),  # R % 4 != 0: element staging, short last slice
    ("nn.LayerNorm(280)", "self.norm(x)", "3, 280", 4),  # Welford pair
    ("nn.Identity()", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", "4, 203", 8),  # a plain sum (L1 norm)
    ("nn.Identity()", "torch.logsumexp(x, dim=1)", "3, 160", 2),  # one value a row: one block of the cluster writes it
    ("nn.Identity()", "x - torch.mean(x, dim=1, keepdim=True)", "5, 1027", 4),  # rows off 16-byte boundaries: shifted slices
])
def test_rows_cached_across_a_cluster_match_a_float64_truth(tmp_egg, module, expr, shape, C):
    """A row too long for one block's shared memory (KernelBench 23/24: 1.5 MB) split over a cluster of
    blocks: each stages its slice once, the partial results (a sum, a max with its sum of exps, a
    Welford triple) are exchanged through distributed shared memory and folded in rank order. Emulated
    with the cluster's blocks running at once; against a float64 truth."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager_err = _rows_case(tmp_egg, "cl", module, expr, shape, 6,
                                                      lambda dims: torch.randn(*dims) * 2.0 + 1.0)
    k = rowwise.RowKnobs(mapping="block", block=64, cache="cluster", cluster=C, waves=1)
    src = rowwise.render(g, plan, k)
    assert f"__cluster_dims__({C}, 1, 1)" in src and "cluster_map(cx, rk)" in src
    assert ("const int sh" in src) == (plan.R % 4 != 0 and plan.R >= 64)
    grid = rowwise.grid(plan, k, 4, 256)
    assert grid % C == 0
    got = cpu_emulator.run(src, "egg_rows", grid, k.block, tuple(truth.shape), [x, *params], tmp_egg / "emu")
    err = _rel_err(got, truth)
    assert err < 8 * max(eager_err, 2 ** -24), (err, eager_err)


@pytest.mark.parametrize("timing", ["", "late_copies"])
@pytest.mark.parametrize("module,expr,online,shape", [
    ("nn.Identity()", "torch.softmax(x, dim=1)", False, "5, 600"),  # max, then the sum of exps: plain passes
    ("nn.Identity()", "torch.log_softmax(x, dim=1)", True, "5, 600"),  # the online pair: one pass, then the output
    ("nn.LayerNorm(600)", "self.norm(x)", True, "5, 600"),  # a Welford triple and the norm's weight and bias
    ("nn.Identity()", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", True, "5, 600"),  # a plain sum (L1 norm)
    # rows off 16-byte boundaries (KernelBench 38/39's 65535): each slice copied from the boundary before it, its
    # neighbours' elements skipped; the tensor's last 2 floats past a boundary, loaded one by one
    ("nn.Identity()", "torch.softmax(x, dim=1)", True, "5, 602"),
    ("nn.Identity()", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", True, "5, 602"),
])
def test_cluster_rows_on_a_ring_of_bulk_copies_match_a_float64_truth(tmp_egg, module, expr, online, shape, timing):
    """The cluster's slices copied by bulk copies in chunks (three a slice here, the last short), a cluster taking
    several rows, so each output pass hands its chunks to the next row's copies. `late_copies` lands a copy only when
    its barrier is waited on: a pass reading a chunk before its wait would read the row before's."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager_err = _rows_case(tmp_egg, "ring", module, expr, shape, 8,
                                                      lambda dims: torch.randn(*dims) * 2.0 + 1.0)
    k = rowwise.RowKnobs(mapping="block", block=32, cache="cluster", cluster=2, waves=1, ring=True, online=online, welford=online)
    src = rowwise.render(g, plan, k)
    assert src.count("mbar_wait(cbar + ch, ph)") == 1 and "fill(ch, row + (gridDim.x / 2))" in src
    assert ("continue;  // a neighbour's element" in src) == (plan.R % 4 != 0)
    assert rowwise.shared_bytes(plan, k) == rowwise.shared_bytes(plan, rowwise.RowKnobs(cache="cluster", cluster=2)) + 3 * 8
    grid = rowwise.grid(plan, k, 4, 256)
    assert grid == 4  # two clusters for five rows
    got = cpu_emulator.run_program(src, [("egg_rows", (grid,), k.block, ["out", "x", *[f"p{i}" for i in range(len(params))]])],
                                   {"out": truth.numel()}, {"x": x, **{f"p{i}": t for i, t in enumerate(params)}}, "out",
                                   tmp_egg / f"emu_{timing}", timing=timing).reshape(truth.shape)
    err = _rel_err(got, truth)
    assert err < 8 * max(eager_err, 2 ** -24), (err, eager_err)


def test_long_rows_default_to_a_cluster(tmp_egg):
    """KernelBench 39's rows (393216 floats, an L2 norm): a cluster of 8 blocks of 1024 threads, 192 KB of
    the row in each; rows that fit one block's shared memory do not. A softmax row of the same length
    streams (its per-element exp lost in the cluster on the H200) and gets the cluster as a variant."""
    from agents.expert import ExpertAgent
    agent = ExpertAgent()
    p = tmp_egg / "soft.py"
    p.write_text(TEMPLATE.format(module="nn.Identity()", expr="torch.softmax(x, dim=1)", shape="64, 393216"))
    g, fam, plan = agent._plan(str(p))
    d = agent._default(fam, g, plan, None)
    assert (d["cache"], d.get("vec")) == ("none", 4)
    from state import KernelCandidate
    from tests.test_expert import PROFILE, request
    best = KernelCandidate(id="a", stage="algorithm_design", **agent.emit(g, fam, plan, d, PROFILE).model_dump())
    mem = agent.propose(request(p, "memory_optimization", best)).kernels
    assert mem[0].params["cache"] == "cluster"
    p = tmp_egg / "long.py"
    p.write_text(TEMPLATE.format(module="nn.Identity()", expr="x / torch.norm(x, p=2, dim=1, keepdim=True)", shape="64, 393216"))
    g, fam, plan = agent._plan(str(p))
    d = agent._default(fam, g, plan, None)
    assert (d["cache"], d["cluster"], d["block"]) == ("cluster", 8, 1024)
    assert rowwise.shared_bytes(plan, rowwise.RowKnobs(cache="cluster", cluster=8)) <= 227 * 1024
    from hardware_profiles import load_profile
    a100 = load_profile("a100_80gb")  # no clusters before compute capability 9.0: the row stays in one block
    assert agent._default(fam, g, plan, None, a100)["cache"] == "none"
    with pytest.raises(Exception, match="clusters on"):
        agent.emit(g, fam, plan, d, a100)
    p = tmp_egg / "short.py"
    p.write_text(TEMPLATE.format(module="nn.Identity()", expr="torch.softmax(x, dim=1)", shape="8, 4096"))
    g, fam, plan = agent._plan(str(p))
    assert agent._default(fam, g, plan, None)["cache"] == "none"


@pytest.mark.parametrize("module,expr,shape", [
    ("nn.Identity()", "torch.softmax(x, dim=1)", "3, 1032"),
    ("nn.LayerNorm(1024)", "self.norm(x)", "2, 1024"),
    ("nn.Identity()", "torch.sum(x * x, dim=1)", "5, 1100"),  # one value a row
    # rows that are not whole 16-byte pieces (KernelBench L2 15: 123039): the odd elements at each end one by
    # one, the body from the row's first 16-byte boundary (rows 0-4 start at every offset mod 4)
    ("nn.Identity()", "torch.softmax(x, dim=1)", "5, 1031"),
    ("nn.LayerNorm(1027)", "self.norm(x)", "4, 1027"),
    ("nn.Identity()", "torch.sum(x * x, dim=1)", "6, 1101"),
    ("nn.Identity()", "x - torch.mean(x, dim=1, keepdim=True)", "7, 65"),  # a body of 15 pieces at most
    ("nn.GroupNorm(2, 8)", "self.norm(x)", "3, 8, 96"),  # x read through its (N, G, -1) view (KernelBench 35)
])
def test_rows_read_16_bytes_a_thread(tmp_egg, module, expr, shape):
    """Rows over a contiguous fp32 row (KernelBench 4's matrix-vector product, 0.76x eager at 58% of the
    roofline with 4-byte reads): the main input in 16-byte pieces, each element in turn, for a block and
    a warp per row; against a float64 truth."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager_err = _rows_case(tmp_egg, "v", module, expr, shape, 2, lambda dims: torch.randn(*dims))
    for mapping in ("block", "warp"):
        k = rowwise.RowKnobs(mapping=mapping, block=64, waves=1, vec=4)
        assert rowwise.vectorizable(plan, k) and rowwise.aligned16(plan, k)
        src = rowwise.render(g, plan, k)
        assert "float4 mvs[" in src and (("const long long hd" in src) == (plan.R % 4 != 0))
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x, *params],
                               tmp_egg / f"emu_{mapping}")
        err = _rel_err(got, truth)
        assert err < 8 * max(eager_err, 2 ** -24), (mapping, err, eager_err)


def _inputs_case(tmp, args: str, expr: str, xs: list):
    """A task `forward(args) = expr` on inputs shaped like `xs`, planned as rows: (graph, plan, float64 truth on xs,
    eager fp32's error)."""
    p = tmp / "t.py"
    shapes = ", ".join(f"torch.randn({', '.join(map(str, x.shape))})" for x in xs)
    p.write_text(f"import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, {args}):\n"
                 f"        return {expr}\ndef get_inputs():\n    return [{shapes}]\ndef get_init_inputs():\n    return []\n")
    loaded = load_task(p)
    g = export_graph(loaded)
    model = loaded.make_model(42)
    truth = model(*[x.double() for x in xs]).detach()
    return g, rowwise.plan_rows(g), truth, _rel_err(model(*xs).detach(), truth)


@pytest.mark.parametrize("expr,shape,full", [
    ("((x - y) ** 2).sum(1) + (x * z).sum(1)", "6, 64", False),  # two sums of the three inputs, one pass
    ("(x - y) * z / (x * y).sum(1, keepdim=True)", "5, 72", True),  # a full-size output from all three
])
def test_rows_of_several_inputs_read_16_bytes_a_thread(tmp_egg, expr, shape, full):
    """Where no one input is the main one (a triplet loss's anchor, positive and negative), each input of the row's
    shape is read in 16-byte pieces; a block and a warp per row, against a float64 truth."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    torch.manual_seed(5)
    xs = [torch.randn(*[int(s) for s in shape.split(",")]) for _ in range(3)]
    g, plan, truth, eager = _inputs_case(tmp_egg, "x, y, z", expr, xs)
    assert plan.main is None and len(plan.cores) == 3 and plan.full_output == full
    for mapping in ("block", "warp"):
        k = rowwise.RowKnobs(mapping=mapping, block=64, waves=1, vec=4)
        assert rowwise.vectorizable(plan, k) and rowwise.aligned16(plan, k)
        src = rowwise.render(g, plan, k)
        assert all(f"float4 mv{j}s[" in src for j in range(3)), src
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), xs,
                               tmp_egg / f"emu_{mapping}")
        assert _rel_err(got, truth) < 8 * max(eager, 2 ** -24), (mapping, _rel_err(got, truth), eager)


@pytest.mark.parametrize("shape,vec", [("6, 256", True), ("5, 66", False)])
def test_a_vector_along_the_row_is_read_at_the_rows_position(tmp_egg, shape, vec):
    """A matrix-vector product (KernelBench 4): the vector, broadcast over the rows, is read at r rather than at a
    64-bit i % R an element, and 16 bytes a read beside the matrix where the row is whole pieces; against float64."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    M, K = (int(v) for v in shape.split(","))
    torch.manual_seed(6)
    xs = [torch.randn(M, K), torch.randn(K, 1)]
    g, plan, truth, eager = _inputs_case(tmp_egg, "a, b", "torch.matmul(a, b)", xs)
    for mapping in ("block", "warp"):
        k = rowwise.RowKnobs(mapping=mapping, block=64, waves=1, vec=4 if vec else 1)
        src = rowwise.render(g, plan, k)
        assert f"% {K}LL" not in src and ("rv1s[q] = *reinterpret_cast<const float4*>(b + r4)" in src) == vec, src
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), xs,
                               tmp_egg / f"emu_{mapping}")
        assert _rel_err(got, truth) < 8 * max(eager, 2 ** -24), (mapping, _rel_err(got, truth), eager)


BN_TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = {module}
        self.drop = nn.Dropout({p}){mode}
    def forward(self, x):
        return self.drop(torch.relu(self.norm(x)))
def get_inputs():
    return [torch.randn({shape})]
def get_init_inputs():
    return []
"""


def _bn_task(tmp, module="nn.BatchNorm2d(6)", p=0.0, mode="", shape="3, 6, 5, 7"):
    path = tmp / "bn.py"
    path.write_text(BN_TEMPLATE.format(module=module, p=p, mode=mode, shape=shape))
    return path


def test_batchnorm_follows_the_mode_the_file_leaves_it_in(tmp_egg):
    """nn.Module starts in training mode and KernelBench's harness never calls eval(): its BatchNorm tasks
    normalize with the batch's statistics, over the batch and positions (non-adjacent dims (0, 2, 3): one
    segmented row a channel, however long; a product, which the grid-level template lacks, over (2, 3),
    then over 0 where the channel is longer than a block holds). A file that calls eval() gets the running
    statistics."""
    g = export_graph(load_task(_bn_task(tmp_egg)))
    reds = [n for n in g.nodes if n.kind == "reduce"]
    assert [tuple(r.dims) for r in reds] == [(0, 2, 3), (0, 2, 3)]  # a channel short enough: one segmented row
    g_long = export_graph(load_task(_bn_task(tmp_egg, shape="64, 6, 32, 32")))  # 65536 a channel: still one row
    assert [tuple(r.dims) for r in g_long.nodes if r.kind == "reduce"] == [(0, 2, 3), (0, 2, 3)]
    from agents.expert.opgraph import _B, _Op
    b = _B([])
    x = b.add("input", "", [], (64, 6, 32, 32), "float32")
    prod = _Op("prod", [x], {}, (6,), "float32", b).red("prod", x, (0, 2, 3), False)
    assert [tuple(n.dims) for n in b.nodes if n.kind == "reduce"] == [(2, 3), (0,)] and prod.shape == (6,)
    assert not any("running" in n.name for n in g.nodes if n.kind == "param" and _reaches(g, n))
    g_eval = export_graph(load_task(_bn_task(tmp_egg, mode="\n        self.eval()")))
    assert not [n for n in g_eval.nodes if n.kind == "reduce"]
    # BatchNorm without running statistics normalizes with the batch's in either mode
    g_nostats = export_graph(load_task(_bn_task(tmp_egg, "nn.BatchNorm2d(6, track_running_stats=False)",
                                                mode="\n        self.eval()")))
    assert len([n for n in g_nostats.nodes if n.kind == "reduce"]) == 2


def _reaches(g, leaf) -> bool:
    from agents.expert.opgraph import ancestors
    return id(leaf) in ancestors(g.output)


@pytest.mark.parametrize("mode", ["", "\n        self.eval()"], ids=["training", "eval"])
def test_batchnorm_program_matches_a_float64_truth(tmp_egg, mode):
    """The module as its file leaves it, on the CPU emulator against float64 in the same mode (running
    statistics made non-trivial, so the eval form is checked against them)."""
    from agents.expert import ExpertAgent
    from tests.test_expert import request
    if not cpu_emulator.available():
        pytest.skip("no g++")
    path = _bn_task(tmp_egg, mode=mode)
    agent = ExpertAgent()
    g, _, _ = agent._plan(str(path))
    k = agent.propose(request(path)).kernels[0]

    def stats(model):
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    err, eager_err = cpu_emulator.run_module(path, g, k, tmp_egg / "emu", prepare=stats)
    assert err < 32 * max(eager_err, 2 ** -24), (err, eager_err)


def test_dropout_in_training_mode_is_a_drawn_mask_and_identity_otherwise(tmp_egg):
    """Training mode, p > 0: x * mask / (1 - p), the mask a drawn leaf (runtime/draws.py); eval mode or p = 0: nothing.
    p = 1 (everything dropped) declines."""
    from agents.expert.opgraph import Unsupported, is_draw
    g = export_graph(load_task(_bn_task(tmp_egg, p=0.2)))
    kept, scale = g.output.args
    assert g.output.op == "mul" and scale == pytest.approx(1 / 0.8) and kept.op == "mul"
    assert kept.args[0].op == "relu" and is_draw(kept.args[1]) and kept.args[1].attrs == {"draw": "dropout", "p": 0.2}
    for p, mode in ((0.2, "\n        self.eval()"), (0.0, "")):
        g = export_graph(load_task(_bn_task(tmp_egg, p=p, mode=mode)))
        assert g.output.op == "relu"
    with pytest.raises(Unsupported, match="p=1.0"):
        export_graph(load_task(_bn_task(tmp_egg, p=1.0)))


DROP_AFTER = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2)
    def forward(self, x):
        x = torch.tanh(x) * 3.0
        return self.drop({expr})
def get_inputs():
    return [torch.randn(4, 50)]
def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("expr,kept", [
    ("torch.clamp(torch.min(x, torch.tensor(0.0)), min=0.0, max=1.0)", True),  # KernelBench L2 83's chain
    ("torch.clamp(torch.relu(x), max=0.0)", True),
    ("torch.clamp(torch.min(x, torch.tensor(0.0)), min=-0.5, max=1.0)", False),  # [-0.5, 0]: the mask shows
    ("torch.clamp(x, min=0.0, max=1.0)", False),
])
def test_training_dropout_of_a_value_that_can_only_be_zero_is_the_identity(tmp_egg, expr, kept):
    """x * mask / (1 - p) is x wherever x is 0 (or NaN): a chain of clamps and min/max that leaves nothing
    else makes the draw invisible, and the dropout is lowered as the identity (no draw); any other value is a
    drawn mask."""
    from agents.expert.opgraph import value_range
    path = tmp_egg / "drop.py"
    path.write_text(DROP_AFTER.format(expr=expr))
    torch.manual_seed(0)
    model, x = load_task(path).make_model(0), torch.randn(4, 50) * 3
    draws = [model(x) for _ in range(3)]
    assert all(torch.equal(d, draws[0]) for d in draws) == kept  # the premise, in torch itself
    g = export_graph(load_task(path))
    if not kept:
        assert g.output.op == "mul" and [n.attrs["draw"] for n in g.inputs if n.attrs.get("draw")] == ["dropout"]
        return
    assert g.output.op == "clamp" and value_range(g.output) == (0.0, 0.0) and not [n for n in g.inputs if n.attrs]


@pytest.mark.parametrize("module,expr,shape,offset", [
    ("nn.BatchNorm1d(70)", "self.norm(x)", "300, 70", 5.0),  # a GEMM+BatchNorm's statistics: a Welford pair
    ("nn.Identity()", "torch.softmax(x, dim=0)", "130, 45", 0.0),  # an online pair, rows not a multiple of 32
    ("nn.Identity()", "torch.sum(x, dim=1)", "3, 200, 40", 0.0),  # a plain sum over a middle dim: outer 3
    ("nn.Identity()", "torch.argmax(x, dim=0)", "257, 33", 0.0),
])
def test_strided_rows_by_cols_blocks_match_a_float64_truth(tmp_egg, module, expr, shape, offset):
    """Mapping cols: 32 strided rows a block, one a lane, the block's warps splitting each row's
    elements and merging in shared memory in warp order, for each kind of pass (plain, argmax, Welford,
    online); lanes past the last row only take part in the merges."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager_err = _rows_case(tmp_egg, "cols", module, expr, shape, 5,
                                                      lambda d: torch.randn(*d) * 2.0 + offset)
    assert plan.inner > 1
    for block in (64, 128):
        k = rowwise.RowKnobs(mapping="cols", block=block, waves=1)
        src = rowwise.render(g, plan, k)
        assert "scol[threadIdx.x]" in src
        if "argmax" in expr:  # the emulator's buffers are float: the indices are small enough to be exact there
            src = src.replace("long long* __restrict__ out", "float* __restrict__ out")
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x, *params],
                               tmp_egg / f"emu_cols_{block}")
        if "argmax" in expr:
            assert torch.equal(got.long(), truth.long()), block
            continue
        err = _rel_err(got, truth)
        assert err < 8 * max(eager_err, 2 ** -24), (block, err, eager_err)


@pytest.mark.parametrize("module,expr,shape,offset", [
    ("nn.Identity()", "x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)", "3, 64, 5, 7", 0.0),  # RMSNorm (L1 36)
    ("nn.Identity()", "torch.softmax(x, dim=1) * 2.0", "2, 13, 33", 0.0),  # an online pair over channels
    ("nn.Identity()", "(x - x.mean(dim=1, keepdim=True)) / torch.sqrt(((x - x.mean(dim=1, keepdim=True)) ** 2)"
                      ".mean(dim=1, keepdim=True) + 1e-5)", "2, 40, 9", 30.0),  # a Welford pair, far from zero
])
def test_strided_rows_held_in_a_threads_registers_match_a_float64_truth(tmp_egg, module, expr, shape, offset):
    """A thread per strided row (a norm over channels) that keeps its row in registers: the input read once,
    every later pass from the registers; the default where the row is short and read again."""
    from agents.expert.agent import ExpertAgent
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager_err = _rows_case(tmp_egg, "treg", module, expr, shape, 5,
                                                      lambda d: torch.randn(*d) * 2.0 + offset)
    assert plan.inner > 1 and plan.main is not None and plan.R <= rowwise.THREAD_REGS
    agent = ExpertAgent()
    d = agent._default("rows", g, plan, None)
    assert d["cache"] == "regs" and d["online"] is False and d["welford"] is False  # plain passes over the registers
    for one_pass, cache in ((False, "regs"), (True, "regs"), (False, "smem"), (True, "smem")):
        # in shared memory (rows too long for registers): each thread's row down a column of the block's buffer
        k = rowwise.RowKnobs(mapping="thread", block=64, cache=cache, waves=1, online=one_pass, welford=one_pass)
        src = rowwise.render(g, plan, k)
        assert src.count(f"{plan.main.name}[i]") == 1  # one read of the input
        assert (f"float xr[{plan.R}];" in src) == (cache == "regs") and ("srow[r * blockDim.x + threadIdx.x]" in src) == (cache == "smem")
        assert rowwise.shared_bytes(plan, k) == (plan.R * 4 * 64 if cache == "smem" else 0)
        got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x, *params],
                               tmp_egg / f"emu_treg_{one_pass}_{cache}")
        err = _rel_err(got, truth)
        assert err < 8 * max(eager_err, 2 ** -24), (one_pass, cache, err, eager_err)
    with pytest.raises(Unsupported, match="too long"):
        rowwise.render(g, plan.__class__(**{**plan.__dict__, "R": rowwise.THREAD_REGS + 1}),
                       rowwise.RowKnobs(mapping="thread", block=64, cache="regs", waves=1))


def test_strided_rows_too_long_for_registers_try_shared_memory(tmp_egg):
    """A softmax over 100 channels (level 2 task 91 has 128): past the registers' 64, the first design reads
    twice; the memory stage offers the rows in shared memory, a column a thread, read once."""
    from agents.expert.agent import ExpertAgent
    from tests.support import stage_kernels
    p = tmp_egg / "sm100.py"
    p.write_text(TEMPLATE.format(module="nn.Identity()", expr="torch.softmax(x, dim=1)", shape="4, 100, 300"))
    ks = stage_kernels(ExpertAgent(), p, max_candidates=100)
    assert ks[0].params["mapping"] == "thread" and ks[0].params["cache"] == "none"
    smem = [k for k in ks if k.params.get("cache") == "smem"]
    assert smem and smem[0].params["block"] == 128 and smem[0].params["mapping"] == "thread"
    assert "srow[r * blockDim.x + threadIdx.x]" in smem[0].cuda_source


@pytest.mark.parametrize("expr,shape", [
    ("torch.sum(x, dim=1, keepdim=True)", "3, 50, 45"),  # 135 outputs: the second warp's last 3 lanes of 4 past the end
    ("torch.mean(x, dim=1)", "2, 33, 130"),
    ("torch.max(x, dim=1)[0]", "3, 20, 41"),
    ("torch.min(x, dim=0)[0] * 2.0 + 1.0", "17, 64"),  # a chain after it
    ("torch.sum(torch.abs(x), dim=1)", "2, 9, 300"),  # and before it
    ("torch.argmin(x, dim=1)", "4, 30, 37"),
    ("torch.argmax(x, dim=1)", "2, 25, 129"),
    ("torch.argmax(torch.round(x), dim=1)", "2, 40, 70"),  # ties: the first index wins, across the split warps too
])
def test_strided_rows_four_a_thread_match_a_float64_truth(tmp_egg, expr, shape):
    """Mapping tcols (templates/colreduce.py): 4 strided rows a thread 32 apart, a warp reading 128 consecutive
    columns of each reduced row together; the first design of a lone reduction over a middle dim (KernelBench
    47-53). Lanes past the last output read the last one's column and store nothing."""
    from agents.expert.agent import ExpertAgent
    from agents.expert.templates import colreduce
    from tests.support import stage_kernels
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager_err = _rows_case(tmp_egg, "tcols", "nn.Identity()", expr, shape, 6, lambda d: torch.randn(*d))
    assert colreduce.reason(g, plan) is None and not colreduce.fills(plan, 132)
    if "keepdim" in expr:  # (once: the stages' candidates take a while) too few outputs for tcols first: offered
        ks = stage_kernels(ExpertAgent(), tmp_egg / "tcols.py", max_candidates=100)
        assert ks[0].params["mapping"] == "thread" and any(k.params["mapping"] == "tcols" for k in ks)
    # one block looping over the warps' groups; several; a block's warps splitting one group's rows (2 and 3 of them)
    for block, sms, split in ((64, 1, False), (32, 3, False), (64, 1, True), (96, 2, True)):
        k = rowwise.RowKnobs(mapping="tcols", block=block, waves=1, split=split)
        assert ("sacc[" in colreduce.render(g, plan, k)) == split
        src = colreduce.render(g, plan, k)
        if "arg" in expr:  # the emulator's buffers are float: the indices are small enough to be exact there
            src = src.replace("long long* __restrict__ out", "float* __restrict__ out")
        got = cpu_emulator.run(src, "egg_rows", colreduce.grid(plan, k, sms, block), k.block, tuple(truth.shape), [x, *params],
                               tmp_egg / f"emu_tcols_{block}_{split}")
        if "arg" in expr:
            assert torch.equal(got.long(), truth.long()), block
            continue
        err = _rel_err(got, truth)
        assert err < 8 * max(eager_err, 2 ** -24), (block, err, eager_err)


def test_strided_rows_four_a_thread_first_where_they_fill_the_gpu(tmp_egg):
    """8 warps an SM at 4 outputs a thread (135168 outputs on 132 SMs): KernelBench 47's 524160 take tcols first, a
    block of 16 warps splitting each group's rows (measured faster than a warp a group on 47 and 51)."""
    from agents.expert.agent import ExpertAgent
    from agents.expert.templates import colreduce
    from tests.support import stage_kernels
    (tmp_egg / "fill.py").write_text(TEMPLATE.format(module="nn.Identity()", expr="torch.amax(x, dim=1)", shape="2, 3, 70000"))
    first = stage_kernels(ExpertAgent(), tmp_egg / "fill.py", max_candidates=1)[0]
    assert first.params["mapping"] == "tcols" and "128 consecutive columns" in first.description
    assert first.params["split"] and first.params["block"] == 512 and "16 warps splitting" in first.description
    assert colreduce.fills(SimpleNamespace(outer=128, inner=4095), 132)


@pytest.mark.parametrize("expr,shape,why", [
    ("torch.sum(x, dim=2)", "3, 5, 40", "middle dim"),  # contiguous rows
    ("torch.softmax(x, dim=1)", "3, 40, 5", "input's size"),
    ("x.sum(dim=1) + x.amax(dim=1)", "3, 40, 5", "several reductions"),
])
def test_strided_rows_four_a_thread_only_for_a_lone_reduction(tmp_egg, expr, shape, why):
    from agents.expert.templates import colreduce
    g, plan, *_ = _rows_case(tmp_egg, "tc_no", "nn.Identity()", expr, shape, 0, lambda d: torch.randn(*d))
    assert why in colreduce.reason(g, plan)


def test_few_strided_rows_default_to_cols_blocks():
    """A GEMM+BatchNorm1d's statistics (KernelBench level 2 task 39: 4096 columns of 16384 rows) would give
    a thread per column, 4096 threads on 132 SMs (7.45 ms on the H200 for 0.8 GB); many strided rows
    (a sum over the middle dim of (128, 4096, 4095)) keep a thread each."""
    from types import SimpleNamespace

    from agents.expert.agent import cols_rows
    h200 = SimpleNamespace(sms=132, max_threads_per_sm=2048)
    assert cols_rows(SimpleNamespace(outer=1, R=16384, inner=4096), h200)
    assert not cols_rows(SimpleNamespace(outer=128, R=4096, inner=4095), h200)
    assert not cols_rows(SimpleNamespace(outer=1, R=16, inner=64), h200)  # too short to split among warps
    assert not cols_rows(SimpleNamespace(outer=64, R=4096, inner=1), h200)  # contiguous rows


@pytest.mark.parametrize("module,expr,shape,mapping,vec", [
    ("nn.LayerNorm(64)", "torch.nn.functional.gelu(self.norm(x)) * 2.0", "3, 50, 64", "warp", 1),  # level 2 task 34's rows
    ("nn.LayerNorm(300)", "self.norm(x)", "70, 300", "warp", 4),
    ("nn.Softmax(dim=1)", "self.norm(x)", "40, 1000", "warp", 4),
    ("nn.LayerNorm(4096)", "self.norm(x)", "3, 4096", "block", 4),
])
def test_short_rows_start_a_warp_each(tmp_egg, module, expr, shape, mapping, vec):
    """The rows family's first design: contiguous rows up to SHORT_ROW long a warp each (shuffles, no
    block barrier a row; a 128-thread block a row of 64 took 6.07 ms for 1 GB on the H100), longer ones a
    block; each matches float64 through the generated host code on the CPU emulator."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    p = tmp_egg / "r.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    d = agent._default(fam, g, plan, None, load_profile("h200"))
    assert fam == "rows" and d["mapping"] == mapping and d.get("vec", 1) == vec, d
    if not cpu_emulator.available():
        pytest.skip("no g++")
    k = agent.emit(g, fam, plan, d, load_profile("h200"))
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 8 * max(eager_err, 2 ** -24), (err, eager_err)


def test_row_length_and_count_pick_warp_or_block():
    """Rows up to WARP_ROW long start a warp each where there is a row for every warp the GPU holds (KernelBench 95's
    32768 rows of 4096: 0.303 -> 0.178 ms on the H100), else a block; fewer rows than SMs a block of 1024, its loop
    unrolled so each thread has several loads in flight (95's mean of 32768 terms, 0.052 ms at 256 threads)."""
    from agents.expert import ExpertAgent
    from agents.expert.agent import WARP_ROW
    from agents.expert.opgraph import OpGraph
    from hardware_profiles import load_profile
    h200 = load_profile("h200")
    agent = ExpertAgent()
    x = SimpleNamespace(dtype="float32", shape=(1, 1))
    g = OpGraph(nodes=[], inputs=[x], params=[], output=x, aten_ops=[])

    def mapping(outer, R):
        plan = SimpleNamespace(seg=0, inner=1, outer=outer, R=R, main=None, cores=[], full_output=False, reductions=[])
        d = agent._default("rows", g, plan, None, h200)
        return d["mapping"], d["block"]
    assert mapping(h200.sms * 64, WARP_ROW) == ("warp", 256)
    assert mapping(h200.sms * 64 - 1, WARP_ROW) == ("block", 256)
    assert mapping(h200.sms * 64, WARP_ROW + 4) == ("block", 256)
    assert mapping(h200.sms - 1, 32768) == ("block", 1024)



def test_a_few_long_rows_unroll_their_loop(tmp_egg):
    """Fewer rows than SMs: each thread of the block's loop has 8 steps' loads in flight, against a float64 truth."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan, x, params, truth, eager = _rows_case(tmp_egg, "few", "nn.Identity()", "x.sum(1) * x.amax(1)", "3, 5000", 8,
                                                  lambda s: torch.randn(*s))
    k = rowwise.RowKnobs(block=64, waves=1)
    src = rowwise.render(g, plan, k)
    assert src.count("#pragma unroll 8") == 1, src  # the two siblings' one loop
    got = cpu_emulator.run(src, "egg_rows", rowwise.grid(plan, k, 2, 256), k.block, tuple(truth.shape), [x, *params], tmp_egg / "emu")
    assert _rel_err(got, truth) <= 32 * max(eager, 2 ** -24), (_rel_err(got, truth), eager)
