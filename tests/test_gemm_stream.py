"""The streaming GEMM of a few rows by weights stored (N, K) (agents/expert/templates/gemm_stream.py): which matmuls
take it first, its K ranges, and its output against a float64 truth on the CPU emulator (whole module: the kernel,
its ranges' reduce with the epilogue, the host code); compiled for sm_90a without spills."""
import re
import shutil

import pytest

from agents.expert.templates import gemm, gemm_stream

LINEAR = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear({K}, {N})
    def forward(self, x):
        return torch.relu(self.fc(x)) * 2.0
def get_inputs():
    return [torch.rand({M}, {K})]
def get_init_inputs():
    return []
"""


def _task(tmp, M, K, N):
    from agents.expert import ExpertAgent
    p = tmp / f"lin_{M}_{K}_{N}.py"
    p.write_text(LINEAR.format(M=M, K=K, N=N))
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    return p, agent, g, fam, plan


@pytest.mark.parametrize("M,K,N,ranges", [(10, 25088, 4096, 16),  # VGG16's first classifier layer: A's slices in 64 KB
                                          (10, 4096, 1000, 9),  # its last: ranges to fill two blocks an SM (132 SMs)
                                          (2, 512, 1000, 2),  # ResNet-18's head: ranges of at least 256
                                          (16, 300, 600, 1)])  # too short to split
def test_a_few_rows_by_many_weight_rows_stream_the_weights(tmp_egg, M, K, N, ranges):
    from hardware_profiles import load_profile
    _, agent, g, fam, plan = _task(tmp_egg, M, K, N)
    d = agent._default(fam, g, plan, None, load_profile("h200"))
    assert d.get("stream") and d["TN"] == 4, d
    k = gemm.GemmKnobs.of(d)
    assert gemm_stream.ranges(plan, k)[0] == ranges
    assert gemm_stream.shared_bytes(plan, k) <= gemm_stream.A_BYTES + 32 * 4 * M


def test_what_the_streaming_gemm_declines(tmp_egg):
    """Weights (K, N) row-major, batches and more than 16 rows keep the tensor-core tiles; a narrow N the narrow
    tiles."""
    from hardware_profiles import load_profile
    _, agent, g, fam, plan = _task(tmp_egg, 17, 512, 1000)
    assert gemm_stream.reason(plan) and not agent._default(fam, g, plan, None, load_profile("h200")).get("stream")
    _, agent, g, fam, plan = _task(tmp_egg, 10, 1000, 256)
    assert gemm_stream.reason(plan) is None and agent._default(fam, g, plan, None, load_profile("h200"))["BM"] == 16
    plan.b_layout = "kn"
    assert "K-contiguous" in gemm_stream.reason(plan)


@pytest.mark.parametrize("M,K,N", [(10, 1000, 1000),  # 3 ranges, the epilogue in the reduce kernel
                                   (3, 250, 700),  # one range: the epilogue in the kernel; K % 4 != 0: 4-byte loads
                                   (16, 1001, 600),  # a partial last row tile, odd K in ranges
                                   (1, 2048, 530)])
def test_the_streaming_gemm_matches_a_float64_truth_on_the_cpu_emulator(tmp_egg, M, K, N):
    import torch

    from hardware_profiles import load_profile
    from tasks import load_task
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p, agent, g, fam, plan = _task(tmp_egg, M, K, N)
    d = agent._default(fam, g, plan, None, load_profile("h100_sxm"))
    assert d.get("stream"), d
    pk = agent.emit(g, fam, plan, d, load_profile("h100_sxm"))
    assert "streaming the weights" in pk.description
    model = load_task(p).make_model(42)
    torch.manual_seed(3)
    x = torch.rand(M, K) - 0.5
    truth = model.double()(x.double())
    eager = model.float()(x).double()
    sd = model.float().state_dict()
    pmap = eval(re.search(r"PARAM_MAP = (\{.*?\})", pk.host_code).group(1))
    feeds = {"x0": x, **{"self." + attr: sd[name].detach().clone() for name, attr in pmap.items()}}
    got = cpu_emulator.run_host(pk.cuda_source, pk.host_code, feeds, tmp_egg / "emu").double()
    scale = truth.abs().max()
    err, eager_err = (got - truth).abs().max() / scale, (eager - truth).abs().max() / scale
    assert got.shape == truth.shape and err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("M,K,N", [(10, 25088, 4096), (16, 4096, 1000), (1, 1001, 700)])
def test_the_streaming_gemm_compiles_for_sm90_without_spills(tmp_egg, M, K, N):
    from hardware_profiles import load_profile
    from runtime.compile import compile_check
    _, agent, g, fam, plan = _task(tmp_egg, M, K, N)
    pk = agent.emit(g, fam, plan, agent._default(fam, g, plan, None, load_profile("h200")), load_profile("h200"))
    r = compile_check(pk.cuda_source, ["-lineinfo"], "sm_90a")
    assert r.ok, r.log[-2000:]
    assert all((x.spill_store_bytes, x.spill_load_bytes) == (0, 0) for x in r.resources), r.resources
    assert max(x.registers for x in r.resources) <= 128, r.resources  # two blocks of 256 an SM at least


def test_the_later_stages_vary_the_streaming_design_and_offer_the_tiles(tmp_egg):
    """Parallel mapping: 2 rows a warp, 4 warps a block, and the narrow and 128-row tile designs as alternatives;
    tiling: the K ranges doubled and halved. Every variant emits."""
    from agents import StageRequest
    from hardware_profiles import load_profile
    from state import DesignRecord, KernelCandidate
    from tasks import load_task, task_spec
    p, agent, g, fam, plan = _task(tmp_egg, 10, 4096, 1000)
    prof = load_profile("h200")
    base = agent._default(fam, g, plan, None, prof)
    best = KernelCandidate(id="c0", stage="algorithm_design", params=base, cuda_source="", host_code="", kernel_names=[],
                           description="", family=fam)
    seen = {}
    for st in ("parallel_mapping", "tiling"):
        req = StageRequest(stage=st, round=1, task=task_spec(load_task(p)), analysis=None, profile=prof,
                           design=DesignRecord(), attempts=[], best=best, max_candidates=8)
        seen[st] = agent._variants(req, fam, g, plan)
        for v in seen[st]:
            agent.emit(g, fam, plan, v, prof)
    pm = seen["parallel_mapping"]
    assert [v.get("TN") for v in pm[:2]] == [2, 4] and pm[1]["WN"] == 4
    assert not pm[2].get("stream") and pm[2]["BM"] == 16 and not pm[3].get("stream") and pm[3]["BM"] == 128
    assert sorted(v["splitk"] for v in seen["tiling"]) == [base["splitk"] // 2, 2 * base["splitk"]]


def test_narrow_tiles_offer_the_streaming_design_in_parallel_mapping(tmp_egg):
    """Where the narrow tiles come first (N <= SMALL_M_MAX_N: task 34's step), parallel mapping measures the
    streamed weights beside them."""
    from agents import StageRequest
    from hardware_profiles import load_profile
    from state import DesignRecord, KernelCandidate
    from tasks import load_task, task_spec
    p, agent, g, fam, plan = _task(tmp_egg, 8, 1280, 256)
    prof = load_profile("h200")
    base = agent._default(fam, g, plan, None, prof)
    assert base["BM"] == 16 and not base.get("stream")
    best = KernelCandidate(id="c0", stage="algorithm_design", params=base, cuda_source="", host_code="", kernel_names=[],
                           description="", family=fam)
    req = StageRequest(stage="parallel_mapping", round=1, task=task_spec(load_task(p)), analysis=None, profile=prof,
                       design=DesignRecord(), attempts=[], best=best, max_candidates=8)
    out = agent._variants(req, fam, g, plan)
    assert out[0].get("stream") and "streaming the weights" in agent.emit(g, fam, plan, out[0], prof).description
