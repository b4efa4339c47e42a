"""The pooling family on the CPU: max/avg pool 1d/2d/3d lowered with their parameters, every variant
compiles for sm_90a, and the kernels, run on the CPU through tests/cpu_emulator.py, match PyTorch at
awkward shapes (padding, dilation, stride > kernel, ceil_mode, count_include_pad, divisor_override)."""
import pytest
import torch

from agents.expert import ExpertAgent
from agents.expert.opgraph import Unsupported, export_graph
from agents.expert.templates import pool
from runtime.compile import compile_check
from tasks import load_task
from tests.support import stage_kernels
from tests import cpu_emulator

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = {module}
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.randn({shape})]
def get_init_inputs():
    return []
"""
CASES = [
    ("max1d", "nn.MaxPool1d(8, stride=1, padding=4, dilation=3)", "self.pool(x)", "2, 3, 61"),
    ("max2d", "nn.MaxPool2d(4, stride=1, padding=1)", "self.pool(x)", "2, 3, 17, 19"),
    ("max2d_ceil", "nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)", "self.pool(x)", "2, 3, 16, 15"),
    ("max3d", "nn.MaxPool3d(3, stride=2, padding=1, dilation=3)", "self.pool(x)", "2, 2, 13, 12, 14"),
    ("avg1d", "nn.AvgPool1d(8, stride=1, padding=4)", "self.pool(x)", "2, 3, 50"),
    ("avg2d_big_stride", "nn.AvgPool2d(11)", "self.pool(x)", "2, 3, 40, 35"),
    ("avg2d_excl_pad", "nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)", "self.pool(x)", "2, 3, 15, 16"),
    ("avg2d_ceil", "nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True)", "self.pool(x)", "2, 3, 16, 15"),
    ("avg2d_divisor", "nn.AvgPool2d(2, divisor_override=3)", "self.pool(x)", "2, 3, 8, 8"),
    ("avg3d", "nn.AvgPool3d(3, stride=2, padding=1)", "self.pool(x)", "2, 2, 9, 10, 11"),
    # rows a multiple of 4: windows read 16 bytes at a time (first input on a boundary, 3 past one)
    ("max1d_16B", "nn.MaxPool1d(8, stride=1, padding=4, dilation=3)", "self.pool(x)", "2, 3, 64"),
    ("avg1d_16B", "nn.AvgPool1d(8, stride=1, padding=4)", "self.pool(x)", "2, 3, 48"),
    ("max3d_16B", "nn.MaxPool3d(3, stride=2, padding=1, dilation=3)", "self.pool(x)", "2, 2, 13, 12, 16"),
    ("avg2d_16B", "nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)", "self.pool(x)", "2, 3, 15, 20"),
    ("relu_pool_tanh", "nn.MaxPool2d(2)", "torch.tanh(self.pool(torch.relu(x)) * 2.0)", "2, 3, 10, 12"),
    ("adaptive2d", "nn.AdaptiveAvgPool2d((2, 3))", "self.pool(x)", "2, 3, 8, 9"),  # windows 4 x 3
    ("adaptive3d", "nn.AdaptiveAvgPool3d((1, 2, 1))", "self.pool(x)", "2, 2, 3, 4, 5"),
]


def task(tmp_path, name, module, expr, shape):
    p = tmp_path / f"{name}.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    return p


def emulated_case(tmp_path, name, module, expr, shape):
    """The case's op graph, pool plan, an input and torch's output; skipped without g++ for the emulator."""
    loaded = load_task(task(tmp_path, name, module, expr, shape))
    g = export_graph(loaded)
    plan = pool.plan_pool(g)
    if not cpu_emulator.available():
        pytest.skip("no g++ to run the kernel on the CPU")
    torch.manual_seed(0)
    x = torch.randn(*[int(s) for s in shape.split(",")])
    return g, plan, x, loaded.make_model(42)(x)


@pytest.mark.parametrize("name,module,expr,shape", CASES, ids=[c[0] for c in CASES])
def test_pool_matches_torch_on_the_cpu(tmp_egg, name, module, expr, shape):
    p = task(tmp_egg, name, module, expr, shape)
    loaded = load_task(p)
    g = export_graph(loaded)
    plan = pool.plan_pool(g)
    kernels = stage_kernels(ExpertAgent(), p)
    for k in kernels:
        r = compile_check(k.cuda_source, k.compile_options, "sm_90a")
        assert r.ok, (k.params, r.errors)
    assert len(kernels) >= 4
    # outputs staged through shared memory where a thread takes several (first at 4), never with one a thread
    assert all(k.params.get("vec", 1) > 1 or not k.params.get("ostage") for k in kernels)
    k0 = pool.PoolKnobs.of(kernels[0].params)
    assert k0.cols == pool.default_cols(g, plan)
    assert k0.ostage == (k0.vec >= 4 and pool.stage_ok(plan, k0))
    assert k0.rows == (1 if k0.cols else pool.default_rows(plan))
    if not cpu_emulator.available():
        pytest.skip("no g++ to run the kernel on the CPU")
    torch.manual_seed(0)
    x = torch.randn(*[int(s) for s in shape.split(",")])
    want = loaded.make_model(42)(x)
    vecs = sorted({k.params.get("vec", 1) for k in kernels})
    assert k0.vec == (1 if k0.cols else pool.default_vec(g, plan))
    if k0.cols:  # a thread an output tried beside it
        assert any(not k.params.get("cols") for k in kernels)
    else:  # others tried too
        assert len(vecs) >= 2 or plan.out[-1] == 1
    for k in (kernels[0], kernels[-1]):
        kn = pool.PoolKnobs.of(k.params)
        got = cpu_emulator.run(k.cuda_source, "egg_pool", pool.grid(plan, kn, 4, 2048), kn.block, tuple(want.shape), [x],
                               tmp_egg / f"emu_{k.params['block']}_{k.params['waves']}_{kn.vec}")
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (k.params, (got - want).abs().max())
    # a thread an output; three (rows of outputs not a multiple of it: the last thread's tail); three and four with
    # the block's outputs stored from shared memory (a block's run across rows and partial last threads)
    for v, ostage in ((1, False), (3, False), (3, True), (4, True)):
        if pool.window_span(plan, v) > pool.MAX_WINDOW_REGS:
            continue
        kn = pool.PoolKnobs(block=64, waves=1, vec=v, ostage=ostage)
        src = pool.render(g, plan, kn)
        assert ("sout[" in src) == ostage
        grid = pool.grid(plan, kn, 1, 64) if ostage else pool.grid(plan, kn, 4, 2048)  # staged: one block, looping
        got = cpu_emulator.run(src, "egg_pool", grid, kn.block,
                               tuple(want.shape), [x], tmp_egg / f"emu_v{v}_{ostage}")
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (v, ostage, (got - want).abs().max())
    with pytest.raises(Unsupported, match="several outputs a thread"):  # nothing to gather with one a thread
        pool.render(g, plan, pool.PoolKnobs(vec=1, ostage=True))


@pytest.mark.parametrize("name,want,wide", [
    ("max1d", 1, False), ("max2d", 4, False), ("max3d", 1, False), ("avg1d", 4, False), ("avg2d_big_stride", 1, False),
    ("avg3d", 4, False), ("max1d_16B", 8, True), ("avg1d_16B", 8, True), ("max3d_16B", 2, True), ("avg2d_16B", 4, True)])
def test_first_vec_only_where_registers_save_loads(tmp_egg, name, want, wide):
    """vec > 1 spreads a warp's threads over vec x stride inputs: worth it where the windows' union saves loads
    (a quarter at least) or is read 16 bytes at a time by threads 16 bytes apart, not where windows do not overlap
    (task 45, measured 0.28x eager at 4) or barely do with 4-byte loads (41, 43)."""
    case = next(c for c in CASES if c[0] == name)
    g = export_graph(load_task(task(tmp_egg, *case)))
    plan = pool.plan_pool(g)
    assert pool.default_vec(g, plan) == want, (name, [pool.window_span(plan, v) for v in (2, 4)])
    src = pool.render(g, plan, pool.PoolKnobs(vec=want))
    assert pool.loads16(g, plan, want) == wide and ("float4" in src) == wide
    assert compile_check(src, [], "sm_90a").ok


@pytest.mark.parametrize("name,module,expr,shape", [c for c in CASES if c[3].count(",") >= 3], ids=[c[0] for c in CASES if c[3].count(",") >= 3])
def test_rows_of_outputs_a_thread_match_torch(tmp_egg, name, module, expr, shape):
    """`rows` output rows a thread (each input row under their windows loaded once, folded along the last dim and
    given to every output row whose window holds it; avg divisors a row; dilated windows skip rows between taps),
    alone, beside `vec`, and with the block's outputs staged (a block of whole row groups looping over the grid)."""
    g, plan, x, want = emulated_case(tmp_egg, name, module, expr, shape)
    for v, r, staged in ((1, 2, False), (4, 3, False), (3, 2, True), (4, 4, True)):
        if pool.window_span(plan, v) > pool.MAX_WINDOW_REGS:
            continue
        block = 64 if not staged else 2 * -(-plan.out[-1] // v)  # staged: two whole groups of output rows a block
        kn = pool.PoolKnobs(block=block, waves=1, vec=v, rows=r, ostage=staged)
        assert pool.stage_ok(plan, kn) or not staged
        src = pool.render(g, plan, kn)
        assert compile_check(src, [], "sm_90a").ok
        grid = pool.grid(plan, kn, 1, block) if staged else pool.grid(plan, kn, 4, 2048)
        got = cpu_emulator.run(src, "egg_pool", grid, kn.block, tuple(want.shape), [x], tmp_egg / f"emu_r{r}_v{v}_{staged}")
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (v, r, staged, (got - want).abs().max())
    if -(-plan.out[-1] // 4) > 1:
        with pytest.raises(Unsupported, match="whole groups"):  # a block's outputs no longer one run
            pool.render(g, plan, pool.PoolKnobs(block=2 * -(-plan.out[-1] // 4) + 1, vec=4, rows=2, ostage=True))


def test_rows_first_only_where_they_halve_the_loads(tmp_egg):
    """KernelBench 42's kernel 4 stride 1 takes 8 rows (11 input rows for 8 output rows); a 1-d pool, windows that
    do not overlap (stride = kernel) or barely do (stride 2, kernel 3) none."""
    want = {"max2d": 8, "max1d": 1, "avg2d_big_stride": 1, "avg3d": 1, "max3d": 1}
    for name, r in want.items():
        case = next(c for c in CASES if c[0] == name)
        plan = pool.plan_pool(export_graph(load_task(task(tmp_egg, *case))))
        assert pool.default_rows(plan) == r, (name, [pool.rows_span(plan, n) for n in (2, 4)] if plan.nd > 1 else None)
    with pytest.raises(Unsupported, match="2-d or 3-d"):
        case = next(c for c in CASES if c[0] == "max1d")
        g = export_graph(load_task(task(tmp_egg, *case)))
        pool.render(g, pool.plan_pool(g), pool.PoolKnobs(vec=1, rows=2))


@pytest.mark.parametrize("name,module,expr,shape", [c for c in CASES if c[3].count(",") >= 3], ids=[c[0] for c in CASES if c[3].count(",") >= 3])
def test_a_block_an_output_row_reducing_columns_matches_torch(tmp_egg, name, module, expr, shape):
    """`cols`: a block an output row, its threads reducing input columns over the window's other dims (16 bytes at a
    time where the input is a float32 tensor with rows a multiple of 4, one column otherwise, the chain before the pool
    applied per element) into shared memory, then a thread an output folding its window along the last dim; blocks of
    32 threads (a thread several column groups) and 2 blocks looping over all rows."""
    g, plan, x, want = emulated_case(tmp_egg, name, module, expr, shape)
    kn = pool.PoolKnobs(block=32, waves=1, cols=True)
    src = pool.render(g, plan, kn)
    assert ("float4" in src) == (pool.cols_vec(g, plan) == 4) and "scol[" in src
    assert compile_check(src, [], "sm_90a").ok
    got = cpu_emulator.run(src, "egg_pool", 2, kn.block, tuple(want.shape), [x], tmp_egg / "emu_cols")
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    with pytest.raises(Unsupported, match="no vec"):
        pool.render(g, plan, pool.PoolKnobs(vec=2, cols=True))


def test_cols_first_only_where_windows_do_not_overlap(tmp_egg):
    """KernelBench 45 (kernel = stride 11) and pools whose per-output mappings save nothing take `cols` first, with 16-byte
    loads from a raw float32 input whose rows are a multiple of 4 long; overlapping windows keep vec/rows; 1-d pools and
    rows too long for shared memory never take it."""
    want = {"avg2d_big_stride": True, "relu_pool_tanh": True, "adaptive2d": True, "max2d": False, "avg3d": False,
            "max1d": False, "avg2d_16B": False}
    for name, w in want.items():
        case = next(c for c in CASES if c[0] == name)
        g = export_graph(load_task(task(tmp_egg, *case)))
        plan = pool.plan_pool(g)
        assert pool.default_cols(g, plan) == w, name
    g = export_graph(load_task(task(tmp_egg, "kb45", "nn.AvgPool2d(11)", "self.pool(x)", "2, 3, 64, 2048")))
    plan = pool.plan_pool(g)
    assert pool.default_cols(g, plan) and pool.cols_vec(g, plan) == 4 and pool.cols_block(g, plan) == 512
    assert pool.cols_used(plan) == 186 * 11
    g = export_graph(load_task(task(tmp_egg, "wide", "nn.AvgPool2d(11)", "self.pool(x)", "1, 1, 11, 20000")))
    plan = pool.plan_pool(g)
    assert not pool.cols_ok(plan) and not pool.default_cols(g, plan)
    with pytest.raises(Unsupported, match="input columns"):
        pool.render(g, plan, pool.PoolKnobs(cols=True))
