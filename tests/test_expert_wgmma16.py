"""The bf16/fp16 GEMM on the warpgroup MMA (agents/expert/templates/gemm_wgmma16.py): operands staged
K-major into whole swizzled tiles, then wgmma.m64nNk16, run on the CPU emulator (its wgmma reads the
16-bit elements back through the descriptors as the PTX ISA lays them out) against float64; compiled for
sm_90a with ptxas."""
import shutil

import pytest
import torch

from agents.expert.opgraph import export_graph
from agents.expert.templates import gemm, gemm_wgmma16
from runtime.compile import compile_check
from runtime.host_policy import check_host_code
from tasks import load_task

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        return {expr}
def get_inputs():
    return [torch.randn({sa}, dtype=torch.{dt}), torch.randn({sb}, dtype=torch.{dt})]
def get_init_inputs():
    return []
"""


def _graph_plan(tmp, expr, sa, sb, dt):
    p = tmp / "g16.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb)), dt=dt))
    g = export_graph(load_task(p))
    return p, g, gemm.plan_gemm(g)


CASES = [  # expr, A, B, dtype, (BM, BN, stages): B (K, N) transposed by the stage, B (N, K), a batch,
    # partial tiles everywhere, K not a whole tile, a fused epilogue, fp16
    ("torch.matmul(a, b)", (70, 100), (100, 50), "bfloat16", (64, 64, 3)),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 72), (90, 72), "bfloat16", (128, 64, 4)),
    ("torch.bmm(a, b)", (2, 65, 136), (2, 136, 70), "bfloat16", (64, 128, 3)),
    ("torch.matmul(a, b)", (70, 100), (100, 50), "float16", (64, 64, 3)),
    # the ring a tile further ahead (lead: the slot refilled after a second barrier), K of 5 tiles
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 300), (90, 300), "bfloat16", (128, 64, 3, True)),
    ("torch.bmm(a, b)", (2, 65, 136), (2, 136, 70), "float16", (64, 128, 4, True)),
    # tiles copied straight from the tensors (direct: A (M, K), B (N, K), K % 8 == 0): partial tiles, K past
    # the last whole tile, a batch on A, and lead
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 72), (90, 72), "bfloat16", (128, 64, 4, False, True)),
    ("torch.matmul(a, b.T)", (2, 70, 136), (200, 136), "float16", (64, 128, 3, True, True)),
]


@pytest.mark.parametrize("expr,sa,sb,dt,knobs", CASES)
def test_wgmma16_gemm_matches_float64_on_the_cpu_emulator(tmp_egg, expr, sa, sb, dt, knobs):
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p, g, plan = _graph_plan(tmp_egg, expr, sa, sb, dt)
    BM, BN, S, lead, direct = (*knobs, False, False)[:5]
    k = gemm.GemmKnobs(BM=BM, BN=BN, stages=S, wgmma=True, lead=lead, direct=direct)
    src = gemm_wgmma16.render(g, plan, k)
    assert ("egg_gemm_stage" in src) != direct
    assert f"m64n{BN}k16.f32.{gemm_wgmma16.KIND[dt]}" in src and "wg_desc_sw128(sA_s" in src
    torch.manual_seed(3)
    a, b = torch.randn(*sa, dtype=getattr(torch, dt)), torch.randn(*sb, dtype=getattr(torch, dt))
    model = load_task(p).make_model(42)
    want = model(a, b)
    truth = model.double()(a.double(), b.double())
    steps = [("egg_gemm_stage", gemm_wgmma16.stage_grid(plan, k), gemm_wgmma16.STAGE_BLOCK, ["P", "in0", "in1"]),
             ("egg_gemm", gemm_wgmma16.grid(plan, k), k.threads(True), ["out", "P", "in0", "in1"])]
    if direct:
        steps = [("egg_gemm", gemm_wgmma16.grid(plan, k), k.threads(True), ["out", "in0", "in1"])]
    ctype = {"bfloat16": "__nv_bfloat16", "float16": "__half"}[dt]
    got = cpu_emulator.run_program(src, steps, {"out": (want.numel(), ctype), "P": gemm_wgmma16.staged_node(g, plan, k).shape[0]},
                                   {"in0": a, "in1": b}, "out", tmp_egg / "emu").reshape(want.shape).double()
    scale = truth.abs().max()
    err, eager_err = (got - truth).abs().max() / scale, (want.double() - truth).abs().max() / scale
    assert err < 2 * max(eager_err, 2 ** -9), (err, eager_err)  # the output's own rounding, as eager's
    # a wrong layout, a dropped k-step or an unstaged tile is far off: the check can fail
    lines = src.splitlines()
    one = [i for i, ln in enumerate(lines) if "wgmma_" + gemm_wgmma16.KIND[dt] + f"_n{BN}(d," in ln]
    assert len(one) == 4  # a tile of 64 elements: four k16 steps
    del lines[one[1]]
    got1 = cpu_emulator.run_program("\n".join(lines), steps, {"out": (want.numel(), ctype),
                                    "P": gemm_wgmma16.staged_node(g, plan, k).shape[0]},
                                    {"in0": a, "in1": b}, "out", tmp_egg / "emu1").reshape(want.shape).double()
    assert (got1 - truth).abs().max() / scale > 10 * err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("expr,sa,sb,BN", [("torch.matmul(a, b)", (8192, 8192), (8192, 8192), 128),
                                           ("torch.matmul(a, b.T)", (4096, 4096), (4096, 4096), 256)])
def test_wgmma16_gemm_compiles_for_sm90_without_spills(tmp_egg, expr, sa, sb, BN):
    _, g, plan = _graph_plan(tmp_egg, expr, sa, sb, "bfloat16")
    k = gemm.GemmKnobs(BM=128, BN=BN, stages=4, wgmma=True)
    assert gemm_wgmma16.shared_bytes(plan, k) <= 227 * 1024
    r = compile_check(gemm_wgmma16.render(g, plan, k), ["-lineinfo"], "sm_90a")
    assert r.ok, r.log[-2000:]
    assert sorted(x.name for x in r.resources) == ["egg_gemm", "egg_gemm_stage"]
    assert all((x.spill_store_bytes, x.spill_load_bytes) == (0, 0) for x in r.resources), r.resources
    assert "C7517" not in r.log, r.log[-2000:]  # no wait for the MMAs injected by ptxas


def test_the_agents_wgmma16_design_runs_through_its_host_code(tmp_egg):
    """A bf16 nn.Linear with its bias and GELU: the agent's first design on an H200 is the warpgroup MMA
    (two launches: the stage into a workspace, then the GEMM), mma.sync beside it; none on an A100; the
    module matches float64 within bf16's own rounding on the CPU emulator."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    from tests.test_expert import request
    p = tmp_egg / "lin16.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(136, 200).to(torch.bfloat16)\n"
                 "    def forward(self, x):\n        return torch.nn.functional.gelu(self.fc(x))\n"
                 "def get_inputs():\n    return [torch.randn(150, 136, dtype=torch.bfloat16)]\n"
                 "def get_init_inputs():\n    return []\n")
    agent = ExpertAgent()
    kernels = agent.propose(request(p)).kernels
    assert [bool(k.params.get("wgmma")) for k in kernels] == [True, False]
    first = kernels[0]
    # A (M, K) and the weight (N, K), K a multiple of 8: one kernel copying its tiles from the tensors
    assert first.kernel_names == ["egg_gemm"] and "no staging pass" in first.description and first.params["direct"]
    a100 = request(p).model_copy(update={"profile": load_profile("a100_80gb")})
    assert not any(k.params.get("wgmma") for k in agent.propose(a100).kernels)
    g, fam, plan = agent._plan(str(p))
    # a program's untuned GEMM kernels start the same way (200 columns: a 128-wide tile; 256 from 256 on)
    assert agent._default(fam, g, plan, None, load_profile("h200")) == {**first.params, "BN": 128, "stages": 5}
    staged = agent.emit(g, fam, plan, {**first.params, "direct": False}, load_profile("h200"))  # offered at memory optimization
    assert staged.kernel_names == ["egg_gemm_stage", "egg_gemm"] and "staged K-major" in staged.description
    assert not agent._default(fam, g, plan, None, load_profile("a100_80gb")).get("wgmma")
    if not cpu_emulator.available():
        pytest.skip("no g++")
    k = agent.emit(g, fam, plan, first.params, load_profile("h200"))
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 2 * max(eager_err, 2 ** -9), (err, eager_err)


TMA_CASES = [  # the warp-specialised TMA ring: staged (B (K, N) transposed by the stage), a batch, partial tiles,
    # K of 5 tiles on a 3-slot ring (slots reused: the producer waits on their release); direct from the tensors
    # (the map's bounds zero-fill partial tiles and K past the last whole tile), fp16, one consumer warpgroup
    ("torch.relu(torch.matmul(a, b)) * 2.0", (130, 300), (300, 90), "bfloat16", (128, 64, 3, False)),
    ("torch.bmm(a, b)", (2, 65, 136), (2, 136, 70), "float16", (64, 128, 3, False)),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 296), (90, 296), "bfloat16", (128, 64, 3, True)),
    ("torch.matmul(a, b.T)", (2, 70, 136), (200, 136), "float16", (64, 256, 4, True)),
    # persistent (two blocks walking the tiles, the ring's phases running on across them): staged with a batch
    # (tiles of two entries), direct with partial tiles and K of 5 tiles on 3 slots
    ("torch.bmm(a, b)", (2, 130, 136), (2, 136, 70), "bfloat16", (64, 64, 3, False, True)),
    ("torch.relu(torch.matmul(a, b.T)) * 2.0", (200, 296), (150, 296), "bfloat16", (128, 64, 3, True, True)),
    # B (K, N) read as it is (MN-major, 64-column boxes, the MMA's B transposed): N past the last whole box, K of 5
    # tiles on 3 slots; a batch in fp16; persistent; an odd N (staged: pairs of columns stored apart)
    ("torch.relu(torch.matmul(a, b)) * 2.0", (130, 296), (296, 136), "bfloat16", (128, 128, 3, True)),
    ("torch.bmm(a, b)", (2, 65, 136), (2, 136, 72), "float16", (64, 256, 3, True)),
    ("torch.matmul(a, b)", (200, 136), (136, 200), "bfloat16", (128, 64, 3, True, True)),
    ("torch.matmul(a, b)", (70, 100), (100, 51), "bfloat16", (64, 64, 3, False)),
    # B multicast over clusters of two row tiles (each block copies half of B's k-tile into both rings): MN-major,
    # K-major from the tensors (a batch on A, partial row tiles), staged (boxes of 32 rows)
    ("torch.relu(torch.matmul(a, b)) * 2.0", (256, 296), (296, 136), "bfloat16", (128, 128, 3, True, False, True)),
    ("torch.matmul(a, b.T)", (2, 120, 136), (200, 136), "float16", (64, 128, 3, True, False, True)),
    ("torch.bmm(a, b)", (2, 100, 136), (2, 136, 70), "bfloat16", (64, 64, 3, False, False, True)),
    # persistent and multicast: a cluster's two blocks walk neighbouring row tiles of one column tile in step (4 pairs on one
    # cluster; a batch of partial tiles staged)
    ("torch.relu(torch.matmul(a, b)) * 2.0", (256, 296), (296, 136), "bfloat16", (64, 128, 3, True, True, True)),
    ("torch.bmm(a, b)", (2, 100, 136), (2, 136, 70), "bfloat16", (64, 64, 3, False, True, True)),
    # B MN-major in one 4-d box a k-tile (its 64-column blocks a dim 128 bytes apart): N past the last whole tile (the
    # box's blocks past N / 64 zero), K of 5 tiles on 3 slots; a batch on B
    ("torch.relu(torch.matmul(a, b)) * 2.0", (130, 296), (296, 192), "bfloat16", (128, 128, 3, True, False, False, True)),
    ("torch.bmm(a, b)", (2, 65, 136), (2, 136, 128), "float16", (64, 256, 3, True, False, False, True)),
    # ping-pong (persistent, the two consumer warpgroups taking 64-row tiles in turn, named barriers between them):
    # B MN-major with partial tiles and K of 5 tiles on 3 slots; staged with a batch
    ("torch.relu(torch.matmul(a, b)) * 2.0", (200, 296), (296, 136), "bfloat16", (128, 64, 3, True, True, False, False, True)),
    ("torch.bmm(a, b)", (2, 130, 136), (2, 136, 70), "bfloat16", (128, 64, 3, False, True, False, False, True)),
]


@pytest.mark.parametrize("expr,sa,sb,dt,knobs", TMA_CASES)
def test_tma_gemm_matches_float64_through_its_host_code(tmp_egg, expr, sa, sb, dt, knobs):
    """The TMA GEMM's module (maps encoded by egg.tmap, passed before `out`) on the CPU emulator, whose TMA
    copies the box into the 128-byte swizzle and whose barriers count arrivals and bytes: the producer
    waits for a slot's release, the consumers for its bytes. A dropped release hangs; a wrong box, swizzle or
    phase is far off the truth."""
    from agents.expert import host
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p, g, plan = _graph_plan(tmp_egg, expr, sa, sb, dt)
    BM, BN, S, direct, persist, mcast, bchunks, pingpong = (*knobs, False, False, False, False)[:8]
    k = gemm.GemmKnobs(BM=BM, BN=BN, stages=S, wgmma=True, tma=True, direct=direct, persist=persist, mcast=mcast, bchunks=bchunks,
                       pingpong=pingpong)
    src = gemm_wgmma16.render(g, plan, k)
    assert ("egg_gemm_stage" in src) != direct and "cp.async.bulk.tensor.3d" in src and k.threads(True) == 2 * BM + 128
    maps = gemm_wgmma16.tensor_maps(g, plan, k)
    if persist:
        assert gemm_wgmma16.grid(plan, k, 2) == (2, 1, 1) and "tile += gridDim.x" in src
    assert ("__cluster_dims__(2, 1, 1)" in src) == ("tma_load_mc(" in src) == mcast
    assert ("tma_load4(sB" in src) == bchunks
    assert ("named_bar_sync(1 + wg, 256)" in src) == pingpong
    main = host.Launch("egg_gemm", gemm_wgmma16.grid(plan, k, 2), (k.threads(True),), gemm.arg_order(g, plan),
                       gemm_wgmma16.shared_bytes(plan, k), maps=maps)
    steps = [(main, None)]
    if not direct:
        staged = gemm_wgmma16.staged_node(g, plan, k)
        steps = [(host.Launch("egg_gemm_stage", gemm_wgmma16.stage_grid(plan, k), (gemm_wgmma16.STAGE_BLOCK,),
                              gemm.arg_order(g, plan), 0), staged)] + steps
    code = host.module_source_program(g, [(ln, n or g.output) for ln, n in steps])
    assert code.count("egg.tmap(") == 2
    check_host_code(code, "strict")  # egg.tmap is host code's to call
    torch.manual_seed(3)
    a, b = torch.randn(*sa, dtype=getattr(torch, dt)), torch.randn(*sb, dtype=getattr(torch, dt))
    model = load_task(p).make_model(42)
    want = model(a, b)
    truth = model.double()(a.double(), b.double())
    got = cpu_emulator.run_host(src, code, {"x0": a, "x1": b}, tmp_egg / "emu").double()
    scale = truth.abs().max()
    err, eager_err = (got - truth).abs().max() / scale, (want.double() - truth).abs().max() / scale
    assert err < 2 * max(eager_err, 2 ** -9), (err, eager_err)
    # B's box at A's rows (a wrong map coordinate) is far off: the check can fail
    bad = (src.replace("tma_load(sB + s * ", "tma_load(sB + s * 0 * ").replace("tma_load_mc(sB + s * ", "tma_load_mc(sB + s * 0 * ")
           .replace("tma_load4(sB + s * ", "tma_load4(sB + s * 0 * ")
           .replace("&mB, kt * 64, (int)n0", "&mB, kt * 64, (int)m0"))
    assert bad != src
    got1 = cpu_emulator.run_host(bad, code, {"x0": a, "x1": b}, tmp_egg / "emu1").double()
    off = (got1 - truth).abs().max() / scale
    assert off.isnan() or off > 10 * err  # NaN: the mutant read shared memory never written (the emulator's poison)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("BM,direct,expr,mcast,persist", [(128, False, "torch.matmul(a, b)", False, False),
                                                           (128, True, "torch.matmul(a, b.T)", False, False),
                                                           (128, True, "torch.matmul(a, b)", False, False), (64, False, "torch.matmul(a, b)", False, False),
                                                           (128, True, "torch.matmul(a, b)", True, False), (128, True, "torch.matmul(a, b.T)", True, False),
                                                           (128, True, "torch.matmul(a, b)", True, True)])
def test_tma_gemm_compiles_for_sm90_without_spills(tmp_egg, BM, direct, expr, mcast, persist):
    """8192^3 on 128x256 tiles and 4 stages (B K-contiguous, or (K, N) read MN-major; B multicast over clusters
    of two, on the persistent tile loop too): the consumers' 128 accumulators a thread within the registers the
    producer gives up (setmaxnreg), no spill, no MMA wait injected by ptxas."""
    _, g, plan = _graph_plan(tmp_egg, expr, (8192, 8192), (8192, 8192), "bfloat16")
    k = gemm.GemmKnobs(BM=BM, BN=256, stages=4, wgmma=True, tma=True, direct=direct, mcast=mcast, persist=persist)
    if persist:  # a block an SM, whole clusters of two (an odd SM count leaves one out)
        assert gemm_wgmma16.grid(plan, k, 133) == ((132, 1, 1) if mcast else (133, 1, 1))
    assert gemm_wgmma16.shared_bytes(plan, k) <= 227 * 1024
    src = gemm_wgmma16.render(g, plan, k)
    assert ("regs_inc<232>();" in src) == (BM == 128)
    r = compile_check(src, ["-lineinfo"], "sm_90a")
    assert r.ok, r.log[-2000:]
    assert all((x.spill_store_bytes, x.spill_load_bytes) == (0, 0) for x in r.resources), r.resources
    if BM == 128:  # setmaxnreg moves registers within what the block was given: 384 x 168, all of the SM's 64K
        # (2 x 128 x 232 + 128 x 40 fits it; were the block given fewer, the consumers' increase would wait forever)
        assert next(x.registers for x in r.resources if x.name == "egg_gemm") == 168, r.resources
    assert "C7517" not in r.log and "C7510" not in r.log, r.log[-2000:]


def test_the_tma_ring_is_the_first_design_and_memory_optimization_offers_its_alternatives(tmp_egg):
    """The bf16 linear's first design is the warp-specialised TMA ring (2.01 ms against the cp.async ring's
    2.82 at 8192^3 on the H100), its maps over the input's and the weight's own rows; memory optimisation
    proposes its persistent tile loop, then the cp.async ring; from the cp.async ring it proposes TMA back.
    The module matches float64 on the CPU emulator."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from state import KernelCandidate
    from tests import cpu_emulator
    from tests.test_expert import request
    p = tmp_egg / "lin16.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(136, 300).to(torch.bfloat16)\n"
                 "    def forward(self, x):\n        return torch.relu(self.fc(x))\n"
                 "def get_inputs():\n    return [torch.randn(150, 136, dtype=torch.bfloat16)]\n"
                 "def get_init_inputs():\n    return []\n")
    agent = ExpertAgent()
    tma = agent.propose(request(p)).kernels[0]
    assert tma.params["wgmma"] and tma.params["tma"] and tma.params["stages"] == 4 and "TMA ring" in tma.description
    assert "egg.tmap(x0, (136, 150, 1), (64, 128, 1), 0)" in tma.host_code  # the input's own rows, K innermost
    best = KernelCandidate(id="a", stage="algorithm_design", **tma.model_dump())
    mem = agent.propose(request(p, "memory_optimization", best)).kernels
    assert mem[0].params == {**tma.params, "persist": True} and "persistent" in mem[0].description
    assert "'egg_gemm', (4, 1, 1)" in mem[0].host_code  # 2 x 2 tiles of 128 x 256: as many blocks (at most one an SM)
    ring = mem[1]
    assert ring.params == {**tma.params, "tma": False, "persist": False, "stages": 3} and "cp.async ring" in ring.description
    best2 = KernelCandidate(id="b", stage="memory_optimization", **ring.model_dump())
    assert agent.propose(request(p, "memory_optimization", best2)).kernels[0].params["tma"]
    if not cpu_emulator.available():
        pytest.skip("no g++")
    g, fam, plan = agent._plan(str(p))
    err, eager_err = cpu_emulator.run_module(p, g, agent.emit(g, fam, plan, tma.params, load_profile("h200")), tmp_egg / "emu")
    assert err < 2 * max(eager_err, 2 ** -9), (err, eager_err)


def test_mn_major_b_reads_through_its_descriptor(tmp_egg):
    """B (K, N) read MN-major: the emulator's wgmma reads B's 64-column blocks LBO bytes apart, as the descriptor says
    (the PTX ISA's canonical MN-major layout), so a descriptor with another block stride is far off the truth, while the
    kernel as generated matches float64."""
    from agents.expert import host
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    sa, sb = (130, 136), (136, 200)
    p, g, plan = _graph_plan(tmp_egg, "torch.matmul(a, b)", sa, sb, "bfloat16")
    k = gemm.GemmKnobs(BM=128, BN=128, stages=3, wgmma=True, tma=True, direct=True)
    src = gemm_wgmma16.render(g, plan, k)
    assert "wgmma_bf16_n128_tb(" in src and "egg_gemm_stage" not in src
    main = host.Launch("egg_gemm", gemm_wgmma16.grid(plan, k), (k.threads(True),), gemm.arg_order(g, plan),
                       gemm_wgmma16.shared_bytes(plan, k), maps=gemm_wgmma16.tensor_maps(g, plan, k))
    code = host.module_source_program(g, [(main, g.output)])
    torch.manual_seed(4)
    a, b = torch.randn(*sa, dtype=torch.bfloat16), torch.randn(*sb, dtype=torch.bfloat16)
    truth = a.double() @ b.double()
    errs = []
    for lbo in (gemm_wgmma16.MN_BLOCK * 4, gemm_wgmma16.MN_BLOCK * 2):
        s = src.replace(f"* 64, {gemm_wgmma16.MN_BLOCK * 4})", f"* 64, {lbo})")
        assert (s == src) == (lbo == gemm_wgmma16.MN_BLOCK * 4)
        got = cpu_emulator.run_host(s, code, {"x0": a, "x1": b}, tmp_egg / f"emu{lbo}").double()
        errs.append(float((got - truth).abs().max() / truth.abs().max()))
    assert errs[0] < 2 ** -7 and not errs[1] < 10 * errs[0], errs
