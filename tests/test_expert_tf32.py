"""The 3xTF32 tensor-core GEMM (agents/expert/templates/gemm_tf32.py): every operand layout, odd
sizes, batches and a fused epilogue, run as C++ on the CPU emulator (its mma.m16n8k8 follows the
PTX ISA's fragment layouts) and judged against a float64 truth; compiled for sm_90a with ptxas."""
import shutil

import pytest

from agents.expert.opgraph import export_graph
from agents.expert.templates import gemm, gemm_tf32
from runtime.compile import compile_check
from tasks import load_task

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        return {expr}
def get_inputs():
    return [torch.randn({sa}), torch.randn({sb})]
def get_init_inputs():
    return []
"""

CASES = [  # expr, A shape, B shape, (BM, BN, WM, WN, stages[, ldmatrix])
    ("torch.matmul(a, b)", (70, 75), (75, 50), (32, 32, 2, 1, 3)),  # K % 4 != 0: 4-byte copies, partial tiles
    ("torch.matmul(a, b)", (64, 96), (96, 40), (64, 32, 2, 2, 2)),  # 16-byte copies
    ("torch.matmul(a.T, b)", (96, 40), (96, 72), (32, 32, 2, 1, 3)),
    ("torch.matmul(a, b.T)", (40, 96), (72, 96), (32, 32, 2, 1, 4)),
    ("torch.relu(torch.matmul(a.T, b.T)) * 2.0", (67, 41), (39, 67), (32, 32, 2, 1, 2)),
    ("torch.bmm(a, b)", (3, 33, 44), (3, 44, 20), (32, 32, 2, 1, 3)),
    ("torch.matmul(a, b.T)", (40, 96), (72, 96), (32, 32, 2, 1, 3, True)),  # ldmatrix for A and B
    ("torch.matmul(a, b) + 1.0", (70, 64), (64, 50), (64, 32, 2, 2, 2, True)),  # ldmatrix for A only
    # Hopper's warpgroup MMA (A split in registers, B split into canonical planes): B (K, N) and (N, K),
    # two warpgroups, partial tiles, a batch
    ("torch.matmul(a, b)", (70, 75), (75, 50), (64, 64, 0, 0, 2, "wgmma")),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 64), (72, 64), (128, 64, 0, 0, 3, "wgmma")),
    ("torch.bmm(a, b)", (2, 33, 40), (2, 40, 20), (64, 64, 0, 0, 2, "wgmma")),
]


def _emulate(tmp, expr, sa, sb, knobs, seed=3):
    import torch

    from tests import cpu_emulator
    p = tmp / "t.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb))))
    loaded = load_task(p)
    g = export_graph(loaded)
    plan = gemm.plan_gemm(g)
    BM, BN, WM, WN, S, *ldm = knobs
    k = gemm.GemmKnobs(BM=BM, BN=BN, WM=WM, WN=WN, stages=S, ldm=ldm[:1] == [True], wgmma=ldm[:1] == ["wgmma"])
    torch.manual_seed(seed)
    a, b = torch.randn(*sa), torch.randn(*sb)
    model = loaded.make_model(42)
    want = model(a, b)
    truth = model.double()(a.double(), b.double())
    gx, gy, gz = gemm_tf32.grid(plan, k)
    got = cpu_emulator.run(gemm_tf32.render(g, plan, k), "egg_gemm", gx, k.threads(True), tuple(want.shape), [a, b],
                           tmp / "emu", grid_yz=(gy, gz))
    return want, got, truth


@pytest.mark.parametrize("expr,sa,sb,knobs", CASES)
def test_tf32x3_gemm_is_fp32_grade_on_the_cpu_emulator(tmp_egg, expr, sa, sb, knobs):
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    want, got, truth = _emulate(tmp_egg, expr, sa, sb, knobs)
    got, want = got.double(), want.double()
    scale = truth.abs().max()
    err, eager_err = (got - truth).abs().max() / scale, (want - truth).abs().max() / scale
    # one TF32 product alone is off by ~2^-11; the split keeps every product to ~2^-22
    assert err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


def test_plain_tf32_would_fail_the_same_check(tmp_egg):
    """The check above can fail: dropping the low parts (plain TF32) leaves errors near 1e-3."""
    import torch
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    want, got, truth = _emulate(tmp_egg, "torch.matmul(a, b)", (40, 64), (64, 40), (32, 32, 2, 1, 2))
    scale = truth.abs().max()
    # the same kernel with the two low-part MMAs taken out
    g_src = gemm_tf32.render(*_graph_plan(tmp_egg, "torch.matmul(a, b)", (40, 64), (64, 40)),
                             gemm.GemmKnobs(BM=32, BN=32, WM=2, WN=1, stages=2))
    no_lo = g_src.replace("mma_tf32(part[mi][ni], al[mi], bh[ni]);", "").replace("mma_tf32(part[mi][ni], ah[mi], bl[ni]);", "")
    assert no_lo != g_src
    torch.manual_seed(3)
    a, b = torch.randn(40, 64), torch.randn(64, 40)
    got1 = cpu_emulator.run(no_lo, "egg_gemm", 2, 64, (40, 40), [a, b], tmp_egg / "emu1", grid_yz=(2, 1)).double()
    assert (got1 - truth).abs().max() / scale > 30 * (got.double() - truth).abs().max() / scale


def _graph_plan(tmp, expr, sa, sb):
    p = tmp / "gp.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb))))
    g = export_graph(load_task(p))
    return g, gemm.plan_gemm(g)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("expr,sa,sb", [("torch.matmul(a, b)", (4096, 4096), (4096, 4096)),
                                         ("torch.matmul(a.T, b)", (8192, 2048), (8192, 4096)),
                                         ("torch.matmul(a, b)", (8205, 2949), (2949, 5921))])
def test_tf32x3_gemm_compiles_for_sm90_without_spills(tmp_egg, expr, sa, sb):
    g, plan = _graph_plan(tmp_egg, expr, sa, sb)
    k = gemm.GemmKnobs(BM=128, BN=128, WM=2, WN=4, stages=3, ldm=plan.a_layout == "mk" or plan.b_layout == "nk")
    r = compile_check(gemm_tf32.render(g, plan, k), ["-lineinfo"], "sm_90a")
    assert r.ok, r.log[-2000:]
    assert [(x.spill_store_bytes, x.spill_load_bytes) for x in r.resources] == [(0, 0)]


def test_matrix_vector_product_is_a_row_reduction(tmp_egg):
    """KernelBench 4: (M, K) @ (K, 1) reads A once as rows, not as a GEMM with one useful column."""
    import torch

    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    p = tmp_egg / "mv.py"
    p.write_text(TEMPLATE.format(expr="torch.matmul(a, b)", sa="33, 1500", sb="1500, 1"))
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    assert fam == "rows" and not any(n.kind == "gemm" for n in g.nodes)
    if not cpu_emulator.available():
        pytest.skip("no g++")
    k = agent.emit(g, fam, plan, agent._default(fam, g, plan, None), load_profile("h200"))
    torch.manual_seed(1)
    a, b = torch.randn(33, 1500), torch.randn(1500, 1)
    got = cpu_emulator.run_host(k.cuda_source, k.host_code, {"x0": a, "x1": b}, tmp_egg / "emu")
    truth = a.double() @ b.double()
    want = a @ b
    err, eager_err = (got.double() - truth).norm() / truth.norm(), (want.double() - truth).norm() / truth.norm()
    assert got.shape == (33, 1) and err < 32 * max(eager_err, 2 ** -24), (err, eager_err)


SPLIT_CASES = [  # expr, A shape, B shape, split-K ranges asked for: K not a multiple of BK, a short last range,
    # a batch, a fused epilogue (split-K's second kernel applies it to the summed partials)
    ("torch.matmul(a, b)", (40, 1000), (1000, 36), 4),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0 + 1.0", (33, 700), (20, 700), 5),
    ("torch.bmm(a, b)", (2, 24, 500), (2, 500, 40), 3),
]


@pytest.mark.parametrize("expr,sa,sb,sk", SPLIT_CASES)
def test_split_k_gemm_is_fp32_grade_on_the_cpu_emulator(tmp_egg, expr, sa, sb, sk):
    """Split-K (level 1 task 6: 4 output tiles for 132 SMs): each K range's partial product into a
    workspace, then a second kernel sums them in order and applies the epilogue; the module's two
    launches run as its host code says, judged against a float64 truth."""
    import torch

    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p = tmp_egg / "sk.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb))))
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    params = {"family": "gemm_tf32", "BM": 32, "BN": 32, "WM": 2, "WN": 1, "stages": 3, "splitk": sk}
    k = agent.emit(g, fam, plan, params, load_profile("h200"))
    assert k.kernel_names == ["egg_gemm", "egg_gemm_splitk"] and f"split-K {sk} ways" in k.description
    batch = sa[0] if len(sa) == 3 else 1
    assert f", {sk * batch}), (64,)" in k.host_code  # the first launch's z: a block per (range, batch)
    torch.manual_seed(5)
    a, b = torch.randn(*sa), torch.randn(*sb)
    model = load_task(p).make_model(42)
    want = model(a, b).double()
    truth = model.double()(a.double(), b.double())
    got = cpu_emulator.run_host(k.cuda_source, k.host_code, {"x0": a, "x1": b}, tmp_egg / "emu").double()
    scale = truth.abs().max()
    err, eager_err = (got - truth).abs().max() / scale, (want - truth).abs().max() / scale
    assert got.shape == truth.shape and err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


def test_split_k_is_chosen_where_the_tiles_leave_the_gpu_idle(tmp_egg):
    """KernelBench 6 (M = N = 256, K = 2^19): 4 tiles of 128x128, so K is split to fill the 132 SMs;
    4096^3 (1024 tiles) is not split, nor is a short K; a batch of 2 (2 tiles) would take 66 ranges, but
    each range sums at least MIN_SPLIT_K = 1024 of its K = 65536: 64."""
    from agents.expert import ExpertAgent
    from agents.expert.agent import split_k
    from agents.expert.templates.gemm_tf32 import splits
    agent = ExpertAgent()
    for (sa, sb), want in [(((256, 524288), (524288, 256)), 33), (((4096, 4096), (4096, 4096)), 1),
                           (((256, 1024), (1024, 256)), 1), (((2, 128, 65536), (2, 65536, 128)), 64)]:
        expr = "torch.bmm(a, b)" if len(sa) == 3 else "torch.matmul(a, b)"
        g, plan = _graph_plan(tmp_egg, expr, sa, sb)
        d = agent._default("gemm", g, plan, None)
        assert d.get("splitk", 1) == want == split_k(plan, d, 132), (sa, d)
        assert splits(plan, gemm.GemmKnobs(BM=128, BN=128, splitk=want))[0] == want


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_split_k_gemm_compiles_for_sm90_without_spills(tmp_egg):
    g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b)", (256, 524288), (524288, 256))
    k = gemm.GemmKnobs(BM=128, BN=128, WM=2, WN=4, stages=3, splitk=33)
    r = compile_check(gemm_tf32.render(g, plan, k), ["-lineinfo"], "sm_90a")
    assert r.ok, r.log[-2000:]
    assert sorted(x.name for x in r.resources) == ["egg_gemm", "egg_gemm_splitk"]
    assert all((x.spill_store_bytes, x.spill_load_bytes) == (0, 0) for x in r.resources)


@pytest.mark.parametrize("expr,sa,sb,knobs", [
    ("torch.matmul(a, b)", (70, 32), (32, 48), (32, 32, 2, 1, 3)),  # N % 4 == 0: 16-byte stores, partial row tiles
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (40, 64), (37, 64), (32, 32, 2, 1, 2)),  # N % 4 != 0: element stores
    ("torch.bmm(a, b)", (2, 33, 24), (2, 24, 40), (64, 32, 2, 2, 3)),
    ("torch.matmul(a, b)", (130, 32), (32, 200), (64, 64, 2, 2, 2)),  # K <= 64's first tile: 64x64, 4 warps, 2 stages
])
def test_output_tile_staged_through_shared_memory(tmp_egg, expr, sa, sb, knobs):
    """A short-K GEMM (KernelBench 7, 9) is bound by its stores: the fp32 output tile goes through the
    ring's shared memory and out in 16-byte row pieces; the same values as the fragment stores, against
    a float64 truth."""
    import torch

    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan = _graph_plan(tmp_egg, expr, sa, sb)
    BM, BN, WM, WN, S = knobs
    k = gemm.GemmKnobs(BM=BM, BN=BN, WM=WM, WN=WN, stages=S, ostage=True)
    src = gemm_tf32.render(g, plan, k)
    assert "float* Cs = reinterpret_cast<float*>(smem);" in src
    assert ("reinterpret_cast<float4*>(out" in src) == (plan.N % 4 == 0)
    torch.manual_seed(3)
    a, b = torch.randn(*sa), torch.randn(*sb)
    model = load_task(tmp_egg / "gp.py").make_model(42)
    want, truth = model(a, b).double(), model.double()(a.double(), b.double())
    gx, gy, gz = gemm_tf32.grid(plan, k)
    got = cpu_emulator.run(src, "egg_gemm", gx, k.threads(True), tuple(want.shape), [a, b], tmp_egg / "emu",
                           grid_yz=(gy, gz)).double()
    scale = truth.abs().max()
    assert (got - truth).abs().max() / scale < 4 * max((want - truth).abs().max() / scale, 2 ** -24)


def test_product_sweeps_give_the_same_sums(tmp_egg):
    """order "term" issues the three products as three sweeps over the warp tile (no MMA waiting on the
    one just issued): each accumulator sees the same sums in the same order, so the emulated output is
    bit for bit the default order's."""
    import torch

    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    sa, sb = (70, 96), (96, 50)
    g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b)", sa, sb)
    torch.manual_seed(5)
    a, b = torch.rand(*sa), torch.rand(*sb)  # all positive: the sums' order shows
    outs = []
    for order in ("tile", "term"):
        k = gemm.GemmKnobs(BM=32, BN=32, WM=2, WN=1, stages=3, order=order)
        src = gemm_tf32.render(g, plan, k)
        assert ("++ni) mma_tf32(part[mi][ni], al[mi], bh[ni]);" in src) == (order == "term")
        gx, gy, gz = gemm_tf32.grid(plan, k)
        outs.append(cpu_emulator.run(src, "egg_gemm", gx, k.threads(True), (sa[0], sb[1]), [a, b], tmp_egg / f"emu_{order}",
                                     grid_yz=(gy, gz)))
    truth = a.double() @ b.double()
    assert torch.equal(outs[0], outs[1])
    assert ((outs[1].double() - truth).abs().max() / truth.abs().max()) < 1e-6


def test_short_k_gemms_stage_their_output_or_take_the_planes_by_default(tmp_egg):
    """A store-bound fp32 GEMM (K <= 256) of one k-tile stages its output on mma.sync (64x64 tiles, five blocks an
    SM); from two k-tiles (K >= 64) it takes the planes GEMM with its whole K one fold (KernelBench 7 on the H100:
    2.95 ms against 3.93); a long K the planes with folds of 4; a short side (< 256) stays on mma.sync."""
    from agents.expert import ExpertAgent
    agent = ExpertAgent()
    for (sa, sb), want in [(((32768, 32), (32, 32768)), {"ostage": True, "BM": 64}),
                           (((32768, 64), (64, 32768)), {"planes": True, "fold": 2}),
                           (((32768, 256), (256, 32768)), {"planes": True, "fold": 8}),
                           (((128, 64), (64, 32768)), {"ostage": True, "BM": 64}),
                           (((4096, 4096), (4096, 4096)), {"planes": True, "fold": 4})]:
        g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b)", sa, sb)
        d = agent._default("gemm", g, plan, None)
        assert {key: d.get(key) for key in want} == want, (sa, d)


PLANE_CASES = [  # expr, A shape, B shape, (BM, BN, stages, fold, BK): B (K, N) transposed by the split, B (N, K),
    # A (K, M), partial tiles everywhere, two warpgroups, a fused epilogue, a sum folded every tile, tiles of
    # K 16 and 32, and 10 row tiles (a full group of 8 and a partial one in the tile order)
    ("torch.matmul(a, b)", (70, 75), (75, 50), (64, 64, 3, 2, 32)),
    ("torch.matmul(a, b)", (70, 75), (75, 50), (64, 64, 6, 3, 16)),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 100), (72, 100), (128, 64, 3, 1, 16)),
    ("torch.matmul(a.T, b) + 1.0", (96, 40), (96, 130), (64, 128, 4, 4, 32)),
    ("torch.matmul(a, b)", (581, 40), (40, 150), (64, 64, 4, 1, 16)),
    ("torch.matmul(a, b.T)", (70, 200), (90, 200), (64, 64, 6, 4, 16)),  # K 200: padded to 256 (whole folds of 64)
    ("torch.matmul(a, b)", (130, 100), (100, 70), (128, 64, 3, 2, 32, True)),  # the 128-byte swizzle
    ("torch.matmul(a.T, b)", (96, 70), (96, 130), (64, 128, 3, 1, 32, True)),
    ("torch.bmm(a, b)", (3, 70, 75), (3, 75, 50), (64, 64, 3, 2, 32, True)),  # a batch: each entry's own planes
    ("torch.relu(torch.bmm(a, b)) * 2.0", (2, 130, 40), (2, 40, 90), (128, 64, 3, 1, 16)),  # the epilogue at bz
    # B split in the ring (bsplit: only A's planes in memory): an nn.Linear-like B (N, K) with partial tiles
    # and K past the last whole tile, the swizzle, whole folds, a batch on A only, K 16 tiles with a guarded split
    ("torch.matmul(a, b.T)", (70, 200), (90, 200), (64, 64, 3, 4, 16, False, True)),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 100), (200, 100), (128, 128, 3, 2, 32, True, True)),
    ("torch.matmul(a, b.T)", (70, 64), (50, 64), (64, 64, 3, 2, 32, True, True)),  # K whole folds: no tail test
    ("torch.matmul(a, b.T)", (2, 70, 36), (130, 36), (64, 128, 4, 1, 32, True, True)),
    ("torch.matmul(a, b.T)", (40, 96), (64, 96), (256, 64, 3, 1, 16, False, True)),
    # the ring a tile further ahead (lead): planes over several folds, and B split in the ring
    ("torch.matmul(a, b)", (130, 300), (300, 70), (128, 64, 3, 2, 32, True, False, True)),
    ("torch.matmul(a, b.T)", (70, 200), (90, 200), (64, 64, 4, 2, 16, False, True, True)),
    # the planes' tiles by TMA from a producer warpgroup (tma): folds over a ring whose slots come round
    # again (K 384: 12 tiles on 3 slots), one fold a tile, a batch (its high and low planes a z of the map)
    ("torch.relu(torch.matmul(a, b)) * 2.0", (130, 384), (384, 70), (128, 64, 3, 4, 32, True, False, False, True)),
    ("torch.matmul(a, b.T)", (70, 200), (90, 200), (64, 128, 4, 1, 32, True, False, False, True)),
    ("torch.bmm(a, b)", (3, 70, 75), (3, 75, 50), (64, 64, 3, 2, 32, True, False, False, True)),
]


@pytest.mark.parametrize("expr,sa,sb,knobs", PLANE_CASES)
def test_tf32x3_from_split_planes_is_fp32_grade_on_the_cpu_emulator(tmp_egg, expr, sa, sb, knobs):
    """3xTF32 on the warpgroup MMA from planes split once in memory: the split kernel (A and B into TF32
    high and low planes, K-major, padded to whole tiles), then the GEMM reading four canonical tiles a
    stage; against float64. Without the low planes the same kernel is TF32-grade, so the check can fail."""
    import torch

    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, plan = _graph_plan(tmp_egg, expr, sa, sb)
    BM, BN, S, F, BK, swz, bsplit, lead, tma = (*knobs, False, False, False, False)[:9]
    k = gemm.GemmKnobs(BM=BM, BN=BN, BK=BK, stages=S, wgmma=True, planes=True, fold=F, swz=swz, bsplit=bsplit, lead=lead,
                       tma=tma)
    src = gemm_tf32.render(g, plan, k)
    assert ("wg_desc_sw128(sAh_s" in src) == k.swz
    assert ("reinterpret_cast<float4*>(sBl" in src) == bsplit and ("b -= " in src) != bsplit  # B: no planes
    torch.manual_seed(5)
    a, b = torch.randn(*sa), torch.randn(*sb)
    p = tmp_egg / "gp.py"
    model = load_task(p).make_model(42)
    want = model(a, b)
    truth = model.double()(a.double(), b.double())
    size = gemm_tf32.planes_node(g, plan, k).shape[0]

    def run(source, tag):
        maps = [("P", m.dims, m.box, m.offset, m.elem) for m in gemm_tf32.planes_maps(g, plan, k)] if tma else []
        steps = [("egg_gemm_split", gemm_tf32.split_grid(plan, k), gemm_tf32.SPLIT_BLOCK, ["P", "in0", "in1"]),
                 ("egg_gemm", gemm_tf32.grid(plan, k), k.threads(True), maps + ["out"] + ([] if tma else ["P"]) + ["in0", "in1"])]
        return cpu_emulator.run_program(source, steps, {"out": want.numel(), "P": size}, {"in0": a, "in1": b}, "out",
                                        tmp_egg / tag).reshape(want.shape).double()
    got = run(src, "emu")
    scale = truth.abs().max()
    err, eager_err = (got - truth).abs().max() / scale, (want.double() - truth).abs().max() / scale
    assert err < 4 * max(eager_err, 2 ** -24), (err, eager_err)
    lines = src.splitlines()
    no_lo = "\n".join(ln for ln in lines if not ("wgmma_tf32_n" in ln and ("sAl_s" in ln or "sBl_s" in ln)))
    assert len(no_lo.splitlines()) == len(lines) - 2 * BK // 8  # the two low-part MMAs of each k-step
    got1 = run(no_lo, "emu1")
    assert (got1 - truth).abs().max() / scale > 30 * err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_tf32x3_planes_compile_for_sm90_without_spills(tmp_egg):
    g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b)", (4096, 4096), (4096, 4096))
    for bn, s, bk, tma in ((128, 6, 16, False), (128, 3, 32, False), (64, 8, 16, False), (128, 3, 32, True), (64, 4, 32, True)):
        k = gemm.GemmKnobs(BM=128, BN=bn, BK=bk, stages=s, wgmma=True, planes=True, swz=bk == 32, tma=tma)
        assert gemm_tf32.shared_bytes_planes(plan, k) <= 227 * 1024
        r = compile_check(gemm_tf32.render(g, plan, k), ["-lineinfo"], "sm_90a")
        assert r.ok, r.log[-2000:]
        assert all((x.spill_store_bytes, x.spill_load_bytes) == (0, 0) for x in r.resources), r.resources
        # no wait for the MMAs injected by ptxas (C7517: a fold chosen at run time once made it wait every step)
        assert "Used" in r.log and "C7517" not in r.log, r.log[-2000:]
        if tma:  # the block holds 384 x 168 registers, what setmaxnreg moves from the producer to the consumers
            assert next(x.registers for x in r.resources if x.name == "egg_gemm") == 168, r.resources


def test_planes_candidate_runs_through_its_host_code(tmp_egg):
    """The agent's planes candidate for an nn.Linear (B = the weight, (N, K)) with its bias and ReLU: two
    launches (the split into a workspace, then the GEMM), the first design for a large enough fp32 GEMM
    (600 x 640: planes_pay's smallest square is about 580)
    on a GPU with the warpgroup MMA (mma.sync where it has none, and the alternative offered at parallel
    mapping), matching float64 through the generated host code on the CPU emulator."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    p = tmp_egg / "lin.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(300, 640)\n"
                 "    def forward(self, x):\n        return torch.relu(self.fc(x))\n"
                 "def get_inputs():\n    return [torch.randn(600, 300)]\ndef get_init_inputs():\n    return []\n")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    assert not agent._default(fam, g, plan, None, load_profile("a100_80gb")).get("planes")
    base = agent._default(fam, g, plan, None, load_profile("h200"))
    assert base["planes"] and base["swz"] and base["BK"] == 32
    from state import KernelCandidate
    from tests.test_expert import PROFILE, request
    first = KernelCandidate(id="a", stage="algorithm_design", **agent.emit(g, fam, plan, base, PROFILE).model_dump())
    assert "planes by a first kernel" in first.description and "128-byte swizzle" in first.description
    offered = agent.propose(request(p, "parallel_mapping", first).model_copy(update={"max_candidates": 16})).kernels
    assert not offered[0].params.get("planes") and not offered[0].params.get("wgmma")  # mma.sync, measured beside it
    assert "egg_gemm_split" in first.host_code
    if not cpu_emulator.available():
        pytest.skip("no g++")
    k = agent.emit(g, fam, plan, first.params, load_profile("h200"))
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


def test_the_planes_by_tma_are_the_first_design_and_its_module_runs(tmp_egg):
    """A (600 x 300) @ (300 x 640) fp32 matmul starts on both operands' planes (B (K, N): no split in the
    ring) copied by TMA from a producer warpgroup (level 1 task 1: 1.27 ms against the cp.async ring's
    1.69 and eager's 2.67 on the H100); memory optimisation offers the cp.async ring first; the module
    (two maps of 4-byte elements over the workspace) matches float64 on the CPU emulator."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from state import KernelCandidate
    from tests import cpu_emulator
    from tests.test_expert import PROFILE, request
    p = tmp_egg / "mm.py"
    p.write_text(TEMPLATE.format(expr="torch.matmul(a, b)", sa="600, 300", sb="300, 640"))
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    base = agent._default(fam, g, plan, None, load_profile("h200"))
    assert base["planes"] and base["swz"] and base["tma"] and not base.get("bsplit")
    tma = KernelCandidate(id="a", stage="algorithm_design", **agent.emit(g, fam, plan, base, PROFILE).model_dump())
    assert "TMA from a producer warpgroup" in tma.description
    assert tma.host_code.count("egg.tmap(t0, ") == 2 and ", 4)" in tma.host_code
    ring = agent.propose(request(p, "memory_optimization", tma)).kernels[0]
    assert ring.params == {**base, "tma": False, "stages": 3} and "TMA" not in ring.description
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(p, g, agent.emit(g, fam, plan, tma.params, load_profile("h200")), tmp_egg / "emu")
    assert err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


def test_weight_streaming_linear_splits_b_in_the_ring(tmp_egg):
    """A linear of 128 rows streaming its weight (KernelBench's level 2 task 59 in miniature: 128 x 3000 @
    (2100, 3000)^T): B's planes would cost more traffic than they save (planes_pay says no), so the first
    design on the H200 splits B in the ring (one kernel for A's planes, then the GEMM reading B raw);
    mma.sync on an A100; and through the generated host code it matches float64 on the CPU emulator."""
    from agents.expert import ExpertAgent
    from agents.expert.agent import bsplit_pays, planes_pay
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    p = tmp_egg / "lin.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(3000, 2100)\n"
                 "    def forward(self, x):\n        y = self.fc(x)\n        return y * torch.sigmoid(y) * 2.0\n"
                 "def get_inputs():\n    return [torch.randn(100, 3000)]\ndef get_init_inputs():\n    return []\n")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    assert not planes_pay(plan, {}) and bsplit_pays(plan, {})
    small = {"sms": 8}  # 17 column tiles fill it (on 132 SMs these few tiles would take split-K first)
    assert not agent._default(fam, g, plan, None, load_profile("a100_80gb").model_copy(update=small)).get("planes")
    h200 = load_profile("h200").model_copy(update=small)
    base = agent._default(fam, g, plan, None, h200)
    assert base["planes"] and base["bsplit"]
    k = agent.emit(g, fam, plan, base, h200)
    assert "B's raw tiles split in shared memory" in k.description and "egg_gemm_split" in k.host_code
    assert compile_check(k.cuda_source, k.compile_options, "sm_90a").ok
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


@pytest.mark.parametrize("rows,bsplit", [(1024, False), (512, True)])
def test_linears_where_both_planes_pay_take_the_tma_planes_past_512_rows(tmp_egg, rows, bsplit):
    """KernelBench's (1024, 8192) linears: both planes pay and B is (N, K). B split in the ring ran 2048 x 8192 x
    4096 in 1.67 ms on the H100 where the planes by TMA ran the same shape in 1.20, so past 512 rows the first
    design is the planes by TMA; up to 512 (few row tiles re-split each B tile) B is still split in the ring."""
    from agents.expert import ExpertAgent
    from agents.expert.agent import planes_pay
    from hardware_profiles import load_profile
    p = tmp_egg / "lin.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(2048, 4096)\n"
                 "    def forward(self, x):\n        return torch.relu(self.fc(x))\n"
                 f"def get_inputs():\n    return [torch.randn({rows}, 2048)]\ndef get_init_inputs():\n    return []\n")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    assert planes_pay(plan, {})
    base = agent._default(fam, g, plan, None, load_profile("h200"))
    assert base["planes"] and bool(base.get("bsplit")) == bsplit and bool(base.get("tma")) != bsplit


def test_a_few_rows_split_k_to_fill_the_sms_where_n_is_narrow(tmp_egg):
    """A few rows over a narrow N (10 x 25088 by 25088 x 256, weights stored (N, K)): 4 tiles of 16 x 64 split 98
    ways to fill four blocks an SM (132 SMs). Over a wide N (VGG16's classifier, N = 4096) the weights are streamed
    instead (gemm_stream): narrow tiles were slower there and failed ResNet-18's head on the GPU (SMALL_M_MAX_N)."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b.T)", (10, 25088), (256, 25088))
    d = ExpertAgent()._default("gemm", g, plan, None, load_profile("h200"))
    assert (d["BM"], d["BN"], d.get("splitk")) == (16, 64, 98), d
    for sa, sb in (((10, 25088), (4096, 25088)), ((2, 512), (1000, 512))):  # and ResNet-18's head
        g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b.T)", sa, sb)
        d = ExpertAgent()._default("gemm", g, plan, None, load_profile("h200"))
        assert d.get("stream") and "BM" not in d, (sa, d)


@pytest.mark.parametrize("sa,sb,bm,sk", [((8, 1280), (1280, 256), 16, 5),  # level 3 task 34's step (i2h)
                                         ((10, 1000), (1000, 72), 16, 3),  # ranges not a multiple of the k-tile
                                         ((24, 400), (400, 40), 32, 1)])  # too short a K to split in ranges of 256
def test_a_few_rows_take_narrow_tiles_and_split_k(tmp_egg, sa, sb, bm, sk):
    """A matmul of at most SMALL_M rows: tiles of 16 or 32 rows (a 128-row tile multiplied 120 rows of padding for
    level 3 task 34's 8-row step), K split in ranges of at least SMALL_M_K; fp32 grade against a float64 truth."""
    import torch

    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b)", sa, sb)
    agent = ExpertAgent()
    d = agent._default("gemm", g, plan, None)
    assert (d["BM"], d.get("splitk", 1), d["WM"]) == (bm, sk, 1), d
    if not cpu_emulator.available():
        pytest.skip("no g++")
    k = agent.emit(g, "gemm", plan, d, load_profile("h200"))
    torch.manual_seed(3)
    a, b = torch.rand(*sa), torch.rand(*sb)
    truth = a.double() @ b.double()
    got = cpu_emulator.run_host(k.cuda_source, k.host_code, {"x0": a, "x1": b}, tmp_egg / "emu").double()
    eager_err = ((a @ b).double() - truth).abs().max() / truth.abs().max()
    err = (got - truth).abs().max() / truth.abs().max()
    assert got.shape == truth.shape and err < 4 * max(eager_err, 2 ** -24), (err, eager_err)
