"""The expert agent on the CPU: coverage of the bundled suite, plans, and kernels that compile."""
import pytest

from agents.protocol import StageRequest
from agents.expert import ExpertAgent
from agents.expert.opgraph import export_graph
from hardware_profiles import load_profile
from runtime.compile import compile_check
from state import DesignRecord, KernelCandidate, StageAttempt
from tasks import SUITE_DIR, find_task_files, load_task, task_spec

PROFILE = load_profile("h200")
UNSUPPORTED: dict[str, str] = {}


def request(path, stage="algorithm_design", best=None, attempts=()):
    return StageRequest(stage=stage, round=1, task=task_spec(load_task(path)), analysis=None, profile=PROFILE,
                        design=DesignRecord(), attempts=list(attempts), best=best, max_candidates=4)


@pytest.mark.parametrize("path", find_task_files([SUITE_DIR]), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_suite_task_compiles_or_is_declared_unsupported(path, tmp_egg):
    agent = ExpertAgent()
    prop = agent.propose(request(path))
    if path.stem in UNSUPPORTED:
        assert prop.unsupported and UNSUPPORTED[path.stem] in prop.unsupported and not prop.kernels
        return
    assert prop.unsupported is None and prop.plan.startswith("ops: ")
    fp32_gemm = prop.kernels[0].params.get("family") == "gemm_tf32"  # the tuned kernel (a program's first GEMM)
    gemm16 = prop.kernels[0].params.get("family") == "gemm_tc" and prop.kernels[0].params.get("wgmma")
    conv = "implicit GEMM" in prop.plan
    # one design, except an fp32 GEMM (3xTF32 on tensor cores first, then SIMT fp32), a 16-bit one large
    # enough for the warpgroup MMA (then mma.sync) and a convolution (plain TF32 first, as eager's cuDNN
    # runs it, then 3xTF32: on the warpgroup MMA from staged planes where the first is on it, and on mma.sync)
    wg_conv = conv and prop.kernels[0].params.get("wgmma")
    # (and, for a short-K conv, the whole-K design: second at TF32)
    whole = [k for k in prop.kernels if k.params.get("whole")]
    assert not whole or prop.kernels[1] is whole[0]
    kernels = [k for k in prop.kernels if not k.params.get("whole")]
    assert len(kernels) == (3 if wg_conv else 2 if fp32_gemm or gemm16 or conv else 1)
    if fp32_gemm:
        assert [k.params["family"] for k in prop.kernels] == ["gemm_tf32", "gemm"]
    if gemm16:
        assert [bool(k.params.get("wgmma")) for k in prop.kernels] == [True, False]
        # staged by a first kernel, or (A (M, K), B (N, K)) its tiles copied from the tensors by the GEMM alone
        direct = prop.kernels[0].params.get("direct", False)
        assert prop.kernels[0].kernel_names == (["egg_gemm"] if direct else ["egg_gemm_stage", "egg_gemm"])
    if conv:
        assert [k.params.get("split") for k in kernels] == ([1, 3, 3] if wg_conv else [1, 3])
        assert [bool(k.params.get("planes")) for k in kernels][1:] == ([False, True] if wg_conv else [False])
    for k in prop.kernels:
        res = compile_check(k.cuda_source, k.compile_options, PROFILE.arch)
        assert res.ok, res.log[-2000:]
        assert {r.name for r in res.resources} == set(k.kernel_names)
        assert all(r.spill_store_bytes <= 16 for r in res.resources)  # bmm bf16: 4 bytes (noted)
        assert "class ModelNew" in k.host_code and "egg.launch(" in k.host_code


def test_tuning_stage_touches_only_its_knobs_and_skips_tried():
    path = SUITE_DIR / "level1" / "22_softmax.py"
    agent = ExpertAgent()
    first = agent.propose(request(path)).kernels[0]
    best = KernelCandidate(id="a", stage="algorithm_design", **first.model_dump())
    pm = agent.propose(request(path, "parallel_mapping", best)).kernels
    assert pm and all(set(k.params) == set(first.params) for k in pm)
    changed = {key for k in pm for key in k.params if k.params[key] != first.params[key]}
    assert changed <= {"mapping", "block"}
    mem = agent.propose(request(path, "memory_optimization", best)).kernels
    assert [k.params["cache"] for k in mem][:2] == ["smem", "regs"]  # only untried knob values
    tried = [StageAttempt(stage="memory_optimization", round=1, candidate_id="x", params=mem[0].params,
                          verdict="correct")]
    again = agent.propose(request(path, "memory_optimization", best, tried)).kernels
    # the tried one is not proposed again: the others move up (and the next untried one fills the list)
    assert [k.params for k in again][:len(mem) - 1] == [k.params for k in mem[1:]]
    assert mem[0].params not in [k.params for k in again]


def test_reading_the_reference():
    g = export_graph(load_task(SUITE_DIR / "level2" / "03_linear_swish_bias_bf16.py"))
    assert [n.op for n in g.nodes if n.kind == "gemm"] == ["linear"]
    assert {p.target for p in g.params} == {"linear.weight", "linear.bias", "bias"}
    g = export_graph(load_task(SUITE_DIR / "level1" / "17_max_dim.py"))
    assert [n.op for n in g.nodes if n.kind == "reduce"] == ["amax"]  # the unused indices are pruned


def test_pointwise_starts_at_16_byte_vectors_over_the_whole_grid_and_tries_the_rest():
    path = SUITE_DIR / "level1" / "01_relu.py"
    agent = ExpertAgent()
    first = agent.propose(request(path)).kernels[0]
    assert (first.params["vec"], first.params["waves"]) == (4, 0)
    best = KernelCandidate(id="a", stage="algorithm_design", **first.model_dump())
    req = request(path, "memory_optimization", best)
    req.max_candidates = 3
    mem = agent.propose(req).kernels
    # the grid-stride loop at the same width, then scalar loads both ways; the first kernel is not proposed again
    assert [(k.params["vec"], k.params["waves"]) for k in mem] == [(4, 4), (1, 0), (1, 4)]
    full = first
    g = agent.graph(str(path))
    from agents.expert.templates import pointwise
    k = pointwise.PointwiseKnobs(block=full.params["block"], items=1, vec=4, waves=0)
    numel = 1
    for s in g.output.shape:
        numel *= s
    # one 16-byte vector per thread: the grid covers the tensor, not SMs x waves
    assert pointwise.grid(g, k, PROFILE.sms, PROFILE.max_threads_per_sm) == -(-numel // (k.block * 4))
    assert f"{(-(-numel // (k.block * 4)),)!r}" in full.host_code
    res = compile_check(full.cuda_source, full.compile_options, PROFILE.arch)
    assert res.ok, res.log[-2000:]


@pytest.mark.parametrize("task", ["level1/29_matmul_bf16", "level2/01_linear_relu_bf16"])  # B row-major; B = W^T
def test_tensor_core_gemm_ring_of_cp_async_stages(task):
    path = SUITE_DIR / f"{task}.py"
    agent = ExpertAgent()
    first = next(k for k in agent.propose(request(path)).kernels if not k.params.get("wgmma"))  # mma.sync's
    base = {**first.params, "BM": 128, "BN": 128, "WM": 2, "WN": 4}
    best = KernelCandidate(id="a", stage="tiling", **{**first.model_dump(), "params": base})
    req = request(path, "memory_optimization", best)
    req.max_candidates = 2
    mem = agent.propose(req).kernels
    assert [(k.params["stages"], k.params["pad"]) for k in mem] == [(4, 8), (3, 8)]  # deepest rings first
    for k in mem:
        src = k.cuda_source
        assert f"cp.async.wait_group {k.params['stages'] - 2};" in src and src.count("__syncthreads()") == 1
        res = compile_check(src, k.compile_options, PROFILE.arch)
        assert res.ok, res.log[-2000:]
        r = res.resources[0]
        assert r.spill_store_bytes == 0 and r.registers <= 255
    # the ring's shared memory is in the launch and within the opt-in limit
    assert "shared_mem=" in mem[0].host_code
    smem = int(mem[0].host_code.split("shared_mem=")[1].split(")")[0])
    assert 4 * 128 * 40 * 2 <= smem <= PROFILE.shared_per_block_optin


def test_scalar_input_is_specialised_and_checked(tmp_egg):
    """A Python number among forward's inputs (KernelBench 5): export bakes it in, so the kernel is
    specialised to it like to the shapes, and the host code refuses another value."""
    p = tmp_egg / "scalar.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, a, s):\n"
                 "        return a * s\ndef get_inputs():\n    return [torch.randn(64, 32), 3.5]\n"
                 "def get_init_inputs():\n    return []\n")
    g = export_graph(load_task(p))
    assert g.scalars == [(1, 3.5)] and [n.index for n in g.inputs] == [0]
    (k,) = ExpertAgent().propose(request(p)).kernels
    assert "def forward(self, x0, s1):" in k.host_code and "if s1 != 3.5:" in k.host_code
    assert "3.5f" in k.cuda_source and compile_check(k.cuda_source, k.compile_options, PROFILE.arch).ok


@pytest.mark.parametrize("const", ["torch.tensor(0.25, device=x.device)", "torch.tensor(0.25)"])
def test_one_element_constant_made_in_forward_is_a_number(tmp_egg, const):
    """`torch.min(x, torch.tensor(v, device=x.device))` (KernelBench level 2: 31, 83, 93): export lifts
    the tensor as a constant input (on meta without a value); the kernel takes v as a literal and
    forward keeps the task's own inputs."""
    p = tmp_egg / "const.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                 f"        return torch.min(x * 2.0, {const})\ndef get_inputs():\n    return [torch.randn(64, 32)]\n"
                 "def get_init_inputs():\n    return []\n")
    g = export_graph(load_task(p))
    assert [n.index for n in g.inputs] == [0]
    assert [n.args[1] for n in g.nodes if n.kind == "pw" and n.op == "minimum"] == [0.25]
    (k,) = ExpertAgent().propose(request(p)).kernels
    assert "def forward(self, x0):" in k.host_code and "0.25f" in k.cuda_source
    assert compile_check(k.cuda_source, k.compile_options, PROFILE.arch).ok


COMPUTED_BIAS = """import torch
import torch.nn as nn
import torch.nn.functional as F
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(18, 16))
        self.qb = nn.Parameter(torch.randn(6))
        self.vb = nn.Parameter(torch.randn(6))
    def forward(self, x):
        return torch.relu(F.linear(x, self.w, torch.cat((self.qb, torch.zeros_like(self.vb), self.vb))))
def get_inputs():
    return [torch.randn(40, 16)]
def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("family", ["gemm_tf32", "gemm"])
def test_a_computed_linear_bias_is_evaluated_in_the_epilogue(tmp_egg, family):
    """Swin V2's qkv bias, cat(q_bias, zeros, v_bias), is computed in forward: the epilogue evaluates it at
    the column (it used to read a tensor of the cat node's name, which no kernel argument is)."""
    from tests import cpu_emulator
    p = tmp_egg / "bias.py"
    p.write_text(COMPUTED_BIAS)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    params = agent._default(fam, g, plan, None) if family == "gemm_tf32" else agent._simt_default()
    k = agent.emit(g, fam, plan, params, PROFILE)
    assert compile_check(k.cuda_source, k.compile_options, "sm_90a").ok
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 32 * max(eager_err, 2 ** -24), (err, eager_err)


MISH = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.mish(x * 12.0)
def get_inputs():
    return [torch.randn(4099)]
def get_init_inputs():
    return []
"""


def test_mish_by_one_exp_is_fp32_grade_over_its_whole_range(tmp_egg):
    """egg_mish (x n / (n + 2), n = e^x (e^x + 2)) against float64 on inputs out to +-50: past 20 and past
    the exp's overflow, deep in the negative tail, near 0; within fp32's own error of PyTorch's."""
    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p = tmp_egg / "mish.py"
    p.write_text(MISH)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    k = agent.emit(g, fam, plan, agent._default(fam, g, plan, None), PROFILE)
    assert "egg_mish(" in k.cuda_source
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 4 * max(eager_err, 2 ** -24), (err, eager_err)


def test_gpu_first_candidate_cases_say_what_their_first_design_is(tmp_egg):
    """tests/test_gpu_expert.py's first-candidate cases each name the design they check (a phrase of its description);
    a later change of first design would leave its GPU test checking nothing, found only on a GPU. Here on the CPU,
    the H200's profile."""
    from tests.test_gpu_expert import FIRST_CANDIDATE_TASKS
    agent = ExpertAgent()
    for name, (src, says) in sorted(FIRST_CANDIDATE_TASKS.items()):
        p = tmp_egg / f"{name}.py"
        p.write_text(src)
        first = agent.propose(request(p)).kernels[0]
        assert says in first.description, (name, says, first.description)
