"""NaN in, NaN out where torch gives it: the expert's kernels keep a NaN through relu, clamp, hardtanh, the
shrinks, threshold, maximum, max/min reductions and the online softmax's (max, sum) (fmaxf/fminf would return the other operand and hide it),
and argmax/argmin return the first NaN's index, as torch does. Run on the CPU emulator through each first
design's host code, on inputs with NaN in some rows and none in others."""
import pytest
import torch

from agents.expert import ExpertAgent
from agents.expert.templates import colreduce, rowwise
from hardware_profiles import load_profile
from tasks import load_task
from tests import cpu_emulator
from tests.test_expert_norms import TEMPLATE  # (its module slot holds nn.Identity() here)

def with_nans(shape, seed=3) -> torch.Tensor:
    """randn with a NaN in about one element of 40, none in the first row (dim 0 index 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    mask = torch.rand(*shape, generator=g) < 0.025
    mask[0] = False
    return x.masked_fill(mask, float("nan"))


def same_with_nans(got: torch.Tensor, want: torch.Tensor) -> bool:
    got, want = got.double(), want.double()
    nan = torch.isnan(want)
    return torch.equal(torch.isnan(got), nan) and torch.allclose(got[~nan], want[~nan], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("expr,shape", [
    ("torch.clamp(torch.relu(x) - 0.5, -0.2, 0.7) + nn.functional.hardtanh(x) + nn.functional.hardsigmoid(x)"
     " + torch.maximum(x, x * 0.5)", "4, 300"),
    ("nn.functional.hardshrink(x) + nn.functional.softshrink(x, 0.3) + nn.functional.threshold(x, 0.1, 2.0)"
     " + torch.clamp_min(x, 0.0)", "4, 300"),
    ("torch.amax(x, dim=1)", "8, 500"),
    ("torch.amin(x, dim=1, keepdim=True) * 2.0", "8, 70"),
    ("torch.argmax(x, dim=1)", "8, 600"),
    ("torch.argmin(x, dim=1)", "3, 50, 40"),
    ("torch.amax(x)", "4, 300000"),  # a grid-level reduction
    ("torch.softmax(x, dim=1)", "8, 600"),  # online (max, sum of exps): a NaN makes the row NaN
    ("torch.log_softmax(x, dim=1)", "4, 3000"),
    ("torch.logsumexp(x, dim=1)", "8, 700"),
])
def test_first_designs_keep_nan_as_torch_does(tmp_egg, expr, shape):
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p = tmp_egg / "nan.py"
    p.write_text(TEMPLATE.format(module="nn.Identity()", expr=expr, shape=shape))
    agent, prof = ExpertAgent(), load_profile("h200")
    g, fam, plan = agent._plan(str(p))
    k = agent.emit(g, fam, plan, agent._default(fam, g, plan, None, prof), prof)
    x = with_nans([int(s) for s in shape.split(",")])
    want = load_task(p).make_model(0)(x)
    assert torch.isnan(x).any() and (want.isnan().any() or "arg" in expr)  # the premise: NaN reach torch's output
    src = k.cuda_source.replace("long long* __restrict__ out", "float* __restrict__ out")  # the emulator's buffers are float
    got = cpu_emulator.run_host(src, k.host_code, {"x0": x}, tmp_egg / "emu")
    assert same_with_nans(got.reshape(want.shape), want), (k.description, got.flatten()[:8], want.flatten()[:8])


@pytest.mark.parametrize("split", [False, True])
def test_strided_argmax_four_a_thread_takes_the_first_nan(tmp_egg, split):
    """tcols (a thread 4 outputs; with split, the warps' partials merged in shared memory): the first NaN's index."""
    if not cpu_emulator.available():
        pytest.skip("no g++")
    p = tmp_egg / "am.py"
    p.write_text(TEMPLATE.format(module="nn.Identity()", expr="torch.argmax(x, dim=1)", shape="2, 40, 70"))
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    x = with_nans([2, 40, 70], seed=5)
    want = load_task(p).make_model(0)(x)
    k = rowwise.RowKnobs(mapping="tcols", block=96, waves=1, split=split)
    src = colreduce.render(g, plan, k).replace("long long* __restrict__ out", "float* __restrict__ out")
    got = cpu_emulator.run(src, "egg_rows", colreduce.grid(plan, k, 2, 96), k.block, tuple(want.shape), [x], tmp_egg / "emu")
    assert torch.equal(got.long(), want)


GPU_CASES = [  # the first designs at sizes where the GPU mappings (not the small-row ones) are chosen
    ("torch.clamp(torch.relu(x) - 0.5, -0.2, 0.7) + nn.functional.hardtanh(x) + nn.functional.hardsigmoid(x)"
     " + torch.maximum(x, x * 0.5)", "nn.Identity()", "64, 4096"),
    ("nn.functional.hardshrink(x) + nn.functional.softshrink(x, 0.3) + nn.functional.threshold(x, 0.1, 2.0)",
     "nn.Identity()", "64, 4096"),
    ("torch.amax(x, dim=1)", "nn.Identity()", "128, 8192"),
    ("torch.argmin(x, dim=1)", "nn.Identity()", "128, 8192"),
    ("torch.argmax(x, dim=1)", "nn.Identity()", "32, 64, 8192"),  # a middle dim: tcols where it fills the GPU
    ("torch.amax(x, dim=1)", "nn.Identity()", "32, 64, 8192"),
    ("torch.amax(x)", "nn.Identity()", "4, 3000000"),
    ("torch.softmax(x, dim=1)", "nn.Identity()", "64, 8192"),
    ("torch.logsumexp(x, dim=1)", "nn.Identity()", "128, 4096"),
    ("self.norm(x)", "nn.MaxPool1d(4, 2, 1)", "16, 32, 4096"),
    ("self.norm(x)", "nn.MaxPool2d(3, 2, 1)", "8, 32, 128, 128"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("expr,module,shape", GPU_CASES)
def test_first_designs_keep_nan_as_eager_does_on_the_gpu(tmp_egg, expr, module, shape):
    """The same rule on the device, against eager CUDA: NaN where eager has NaN, the rest close (indices equal)."""
    from runtime.kernel_api import load
    p = tmp_egg / "nan.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    agent, prof = ExpertAgent(), load_profile("h200")
    g, fam, plan = agent._plan(str(p))
    k = agent.emit(g, fam, plan, agent._default(fam, g, plan, None, prof), prof)
    api = load(k.cuda_source, k.compile_options)
    env = {"__name__": "egg_candidate", "egg": api, "torch": torch, "nn": torch.nn}
    exec(compile(k.host_code, "<host code>", "exec"), env)
    task = load_task(p)
    ref = task.make_model(0).cuda()
    new = env["ModelNew"]().cuda()
    x = with_nans([int(s) for s in shape.split(",")]).cuda()
    with torch.no_grad():
        want, got = ref(x), new(x)
    torch.cuda.synchronize()
    assert torch.isnan(x).any()
    if want.dtype == torch.int64:
        assert torch.equal(got.long(), want), (k.description, (got != want).sum().item())
    else:
        assert want.isnan().any() and same_with_nans(got.reshape(want.shape), want), k.description


def test_the_nan_keeping_max_is_one_instruction_from_sm80(tmp_path):
    """egg_max/egg_min: PTX's max.NaN/min.NaN from sm_80 on (a compare, a NaN test and a select before), the plain C++
    form below it (and on the CPU emulator, which the tests above run)."""
    import shutil
    import subprocess
    from agents.expert.codegen import PRELUDE
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    src = tmp_path / "k.cu"
    src.write_text(PRELUDE + 'extern "C" __global__ void k(float* o, const float* a) {\n'
                   "    o[threadIdx.x] = egg_min(egg_max(a[threadIdx.x], 0.0f), 6.0f);\n}\n")
    for arch, fused in (("sm_90a", True), ("sm_80", True), ("sm_75", False)):
        ptx = tmp_path / f"{arch}.ptx"
        subprocess.run(["nvcc", f"-arch={arch}", "-ptx", "-o", str(ptx), str(src)], check=True, capture_output=True)
        text = ptx.read_text()
        assert ("max.NaN.f32" in text and "min.NaN.f32" in text) == fused, arch
        assert ("setp.nan" in text or "setp.num" in text or "setp.gt" in text) != fused, arch
