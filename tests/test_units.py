"""A program's source as several compilation units (state.MODULE_PART): grouped by the agent, compiled
in parallel by runtime.compile, errors placed in the whole source, run on the CPU emulator unchanged."""
import shutil

import pytest

from agents.expert import agent as expert_agent
from agents.expert.codegen import PRELUDE
from runtime.compile import compile_check
from state import MODULE_PART, module_parts

BODY = """extern "C" __global__ void k{i}(float* out, const float* x) {{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    out[j] = to_f(x[j]) * {i}.0f;
}}
"""


def kernel(i: int) -> str:
    return PRELUDE + BODY.format(i=i)



def test_join_units_groups_stages_with_their_preludes_once():
    srcs = [kernel(i) for i in range(10)]
    one = expert_agent.join_units(srcs)
    assert MODULE_PART not in one and one.count(PRELUDE) == 1  # small: one unit, the prelude once
    size = sum(map(len, srcs))
    old = expert_agent.UNIT_CHARS
    try:
        expert_agent.UNIT_CHARS = size // 3
        units = module_parts(expert_agent.join_units(srcs))
    finally:
        expert_agent.UNIT_CHARS = old
    assert len(units) == 3 and all(u.count(PRELUDE) == 1 for u in units)
    assert sum(u.count("__global__") for u in units) == 10  # every kernel once, in stage order
    assert [int(x.split("void k")[1].split("(")[0]) for u in units for x in u.split("__global__")[1:]] == list(range(10))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_units_compile_in_parallel_and_errors_keep_their_line(tmp_egg, monkeypatch):
    monkeypatch.setenv("EGG_CACHE_DIR", str(tmp_egg / "cache"))
    units = [kernel(i) for i in range(3)]
    src = ("\n" + MODULE_PART + "\n").join(units)
    r = compile_check(src, [], "sm_90a", use_cache=False)
    assert r.ok and sorted(x.name for x in r.resources) == ["k0", "k1", "k2"], r.log[-2000:]
    bad = units[2].replace("out[j] =", "out[j] = undefined_name +")
    src = ("\n" + MODULE_PART + "\n").join(units[:2] + [bad])
    r = compile_check(src, [], "sm_90a", use_cache=False)
    line = next(i for i, ln in enumerate(src.splitlines(), 1) if "undefined_name" in ln)
    assert not r.ok and [e.line for e in r.errors] == [line], (r.errors, line)


def test_a_program_in_units_runs_on_the_emulator(tmp_egg, monkeypatch):
    """A conv + training BatchNorm + ReLU program (planned for a GPU without wgmma: with it the task is one
    conv_stats kernel) cut into units (the cut lowered so it splits): the same kernels, the same launches,
    matching float64."""
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    p = tmp_egg / "cbr.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.conv = nn.Conv2d(4, 8, 3, padding=1)\n        self.bn = nn.BatchNorm2d(8)\n"
                 "    def forward(self, x):\n        return torch.relu(self.bn(self.conv(x)))\n"
                 "def get_inputs():\n    return [torch.randn(2, 4, 9, 7)]\ndef get_init_inputs():\n    return []\n")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p), load_profile("a100_80gb"))
    assert fam == "program"
    st = plan.stages()
    params = agent._default(st[plan.tuned][1], st[plan.tuned][0], st[plan.tuned][2], None, load_profile("h200"))
    whole = agent.emit(g, fam, plan, params, load_profile("h200"))
    monkeypatch.setattr(expert_agent, "UNIT_CHARS", len(whole.cuda_source) // 3)
    cut = agent.emit(g, fam, plan, params, load_profile("h200"))
    assert len(module_parts(cut.cuda_source)) > 1 and cut.kernel_names == whole.kernel_names
    assert cut.host_code == whole.host_code
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(p, g, cut, tmp_egg / "emu")
    assert err < 2e-3, (err, eager_err)


def test_units_find_a_kernel_in_the_unit_that_defines_it():
    """Not where it is only mentioned (a helper of a similar name), and a clear error for a name no unit
    defines."""
    from runtime.kernel_api import MODULE_PART as API_PART
    from runtime.kernel_api import Units
    assert API_PART == MODULE_PART  # the exported module's copy of the separator

    class Mod:
        def __init__(self, n):
            self.n = n

        def get_function(self, name):
            return self.n, name
    units = ['extern "C" __global__ void __launch_bounds__(256) egg_a(float* x) { egg_b_helper(x); }',
             'extern "C" __global__ void __launch_bounds__(128) __cluster_dims__(2, 1, 1) egg_b(float* x) {}']
    u = Units([Mod(0), Mod(1)], units)
    assert u.get_function("egg_a").f == (0, "egg_a") and u.get_function("egg_b").f == (1, "egg_b")
    with pytest.raises(KeyError, match="egg_c"):
        u.get_function("egg_c")


def test_a_kernel_loaded_from_a_cubin_has_the_attributes_the_runtime_uses(monkeypatch):
    """NVRTC's cubins load as bare cupy Functions, which lack RawKernel's num_regs and its settable
    dynamic shared-memory limit (on the H100 every program in units failed verification with
    AttributeError: 'Function' object has no attribute 'num_regs'): the wrapper reads and sets them
    through the driver, on the function's own handle, and launches as the function does."""
    api = pytest.importorskip("cupy.cuda")

    from runtime.kernel_api import CubinKernel, Units
    calls = []

    class Driver:
        CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 4, 1
        CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 3, 8

        @staticmethod
        def funcGetAttribute(attr, ptr):
            return {4: 96, 1: 1024, 3: 0, 8: 49152}[attr] + ptr

        @staticmethod
        def funcSetAttribute(ptr, attr, value):
            calls.append((ptr, attr, value))
    monkeypatch.setattr(api, "driver", Driver, raising=False)

    class Function:  # cupy.cuda.function.Function's surface: ptr and __call__
        ptr = 7

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            calls.append(("launch", grid, block, args, shared_mem))

    class Mod:
        def get_function(self, name):
            return Function()
    k = Units([Mod()], ['extern "C" __global__ void egg_a(float* x) {}']).get_function("egg_a")
    assert isinstance(k, CubinKernel)
    assert (k.num_regs, k.shared_size_bytes, k.local_size_bytes, k.max_dynamic_shared_size_bytes) == (103, 1031, 7, 49159)
    k.max_dynamic_shared_size_bytes = 196608
    k((2, 1, 1), (256, 1, 1), (1,), shared_mem=196608)
    assert calls == [(7, 8, 196608), ("launch", (2, 1, 1), (256, 1, 1), (1,), 196608)]


def test_every_dynamic_shared_size_is_opted_into_once(monkeypatch):
    """A kernel's default dynamic limit is 48 KB less its static shared memory: 48 KB dynamic beside a 1 KB row
    table failed to launch on the H100 (CUDA_ERROR_INVALID_VALUE, the wgmma conv's 3-stage 64x64 ring) while
    only sizes past 48 KB were opted into. Every size is now, once per kernel and size."""
    from runtime.kernel_api import KernelAPI
    calls = []

    class Kernel:
        def __setattr__(self, key, value):
            calls.append((key, value))

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            calls.append(("launch", shared_mem))

    class Mod:
        def get_function(self, name):
            return Kernel()
    api = KernelAPI(Mod())
    monkeypatch.setattr(api, "_stream", lambda: None)
    for smem in (0, 49152, 49152, 65536):
        api.launch("egg_a", (1,), (128,), [], smem)
    assert calls == [("launch", 0), ("max_dynamic_shared_size_bytes", 49152), ("launch", 49152), ("launch", 49152),
                     ("max_dynamic_shared_size_bytes", 65536), ("launch", 65536)]
