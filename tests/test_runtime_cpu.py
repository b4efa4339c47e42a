"""Runtime pieces that need no GPU: compile errors and resource reports, the cache, the guard's
classification, the comparison rules, and task loading."""
import pytest
import torch

from runtime import guard
from runtime.compile import compile_check, parse_errors, parse_resources
from runtime.correctness import degenerate_input
from tasks import TaskError, find_task_files, load_task

GOOD = 'extern "C" __global__ void k(float* x) { __shared__ float s[256]; s[threadIdx.x] = x[threadIdx.x]; ' \
       '__syncthreads(); x[threadIdx.x] = s[255 - threadIdx.x]; }'


def test_compile_error_is_structured(tmp_egg):
    r = compile_check('extern "C" __global__ void k(float* x) {\n  x[0] = y;\n}', arch="sm_90a")
    assert not r.ok and r.backend in ("nvrtc", "nvcc")
    assert [(e.line, e.message) for e in r.errors] == [(2, 'identifier "y" is undefined')]


def test_resource_report_and_cache(tmp_egg):
    r = compile_check(GOOD, arch="sm_90a")
    assert r.ok and not r.cached
    (k,) = r.resources
    assert k.name == "k" and k.shared_bytes == 1024 and 4 <= k.registers <= 32 and k.spill_store_bytes == 0
    assert compile_check(GOOD, arch="sm_90a").cached
    assert not compile_check(GOOD, ["-lineinfo"], arch="sm_90a").cached  # options are part of the key
    assert compile_check(GOOD, arch="sm_80").arch == "sm_80"


def test_parsers_on_ptxas_text():
    log = ("ptxas info    : Compiling entry function 'a' for 'sm_90a'\nptxas info    : Function properties for a\n"
           "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_90a'\nptxas info    : Used 12 registers\n")
    a, b = parse_resources(log)
    assert (a.name, a.registers, a.shared_bytes, a.stack_bytes, a.spill_store_bytes, a.spill_load_bytes) == \
        ("a", 40, 2048, 16, 8, 4)
    assert (b.name, b.registers, b.shared_bytes) == ("b", 12, 0)
    assert parse_errors("kern.cu(7): error: expected a \";\"")[0].line == 7
    assert parse_errors("nvcc fatal: unknown option")[0].line is None


@pytest.mark.parametrize("op,kind", [("aten::empty.memory_format", "alloc"), ("aten::view", "view"),
                                     ("aten::t", "view"), ("aten::copy_", "copy"), ("aten::clone", "copy"),
                                     ("aten::sym_size.int", "meta"), ("aten::add.Tensor", "compute"),
                                     ("aten::mm", "compute"), ("aten::_softmax", "compute"), ("aten::relu_", "compute")])
def test_guard_classification(op, kind):
    assert guard.classify(op) == kind


def test_guard_records_and_judges():
    x = torch.randn(8, 8)
    with guard.OpRecorder() as rec:
        torch.empty(3)
        x.view(64)
        x.to(torch.float16)  # a conversion computes
        x.clone()
    assert "aten::_to_copy(dtype conversion)" in rec.ops
    assert guard.judge("strict", ["aten::empty.memory_format", "aten::view"], own_launches=1) == ""
    assert "aten::mm" in guard.judge("strict", ["aten::mm"], own_launches=1)
    assert guard.judge("strict", [], own_launches=0) == "launched no kernel of its own"
    assert guard.judge("mixed", ["aten::convolution"], 1, reference_compute=["aten::convolution", "aten::relu"]) == ""
    assert "reference again" in guard.judge("mixed", ["aten::convolution", "aten::relu"], 1,
                                            reference_compute=["aten::convolution", "aten::relu"])
    with pytest.raises(ValueError):
        guard.judge("lenient", [], 1)


def test_degenerate_inputs():
    assert degenerate_input(torch.zeros(10)) and degenerate_input(torch.full((4,), 3.0))
    assert not degenerate_input(torch.randn(10))


def test_task_loading_errors(tmp_path):
    def write(name, src):
        p = tmp_path / name
        p.write_text("import torch\nimport torch.nn as nn\n" + src)
        return p
    ok = write("ok.py", "class Model(nn.Module):\n    def forward(self, x): return x\n"
                        "def get_inputs(): return [torch.randn(1 << 30)]\ndef get_init_inputs(): return []\n")
    assert load_task(ok).name == "ok"  # 4 GB of inputs: validated on meta tensors, nothing allocated
    not_module = write("nm.py", "class Model: pass\ndef get_inputs(): return [torch.randn(2)]\ndef get_init_inputs(): return []\n")
    with pytest.raises(TaskError, match="torch.nn.Module subclass"):
        load_task(not_module)
    no_tensor = write("nt.py", "class Model(nn.Module): pass\ndef get_inputs(): return [1, 2]\ndef get_init_inputs(): return []\n")
    with pytest.raises(TaskError, match="returned no tensor"):
        load_task(no_tensor)
    not_list = write("nl.py", "class Model(nn.Module): pass\ndef get_inputs(): return torch.randn(2)\n"
                              "def get_init_inputs(): return []\n")
    with pytest.raises(TaskError, match="must return a list"):
        load_task(not_list)
    with pytest.raises(TaskError, match="a task is a .py file"):
        load_task(tmp_path)
    assert [p.name for p in find_task_files([tmp_path])] == ["nl.py", "nm.py", "nt.py", "ok.py"]


def test_the_compile_cache_takes_the_same_result_from_parallel_writers(tmp_path, monkeypatch):
    """Candidates verified in parallel can compile the same source at once: every writer stores the result
    under a temporary name of its own (a shared one was renamed away under the second writer)."""
    import threading

    from runtime import compile as comp
    monkeypatch.setenv("EGG_CACHE_DIR", str(tmp_path))
    res = comp.CompileResult(ok=True, backend="nvrtc", arch="sm_90a", log="", errors=[], resources=[], seconds=0.1)
    errors = []

    def write():
        try:
            for _ in range(50):
                comp._store("k" * 64, res)
        except OSError as exc:
            errors.append(exc)
    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert comp._cached("k" * 64).ok and not list(comp.cache_dir().glob("*.tmp"))


def test_a_tensor_map_that_tma_cannot_take_is_refused_before_the_driver():
    """egg.tmap's checks (no GPU needed): the address and rows 16-byte aligned, a box row of at most 128
    bytes (the swizzle's), no box dim past 256, explicit strides one a dim past the first and multiples of 16."""
    from runtime.kernel_api import encode_tmap
    with pytest.raises(ValueError, match="16-byte-aligned"):
        encode_tmap(0x1008, (64, 128, 1), (64, 128, 1))  # address off 16 bytes
    with pytest.raises(ValueError, match="16-byte-aligned"):
        encode_tmap(0x1000, (36, 128, 1), (64, 128, 1))  # rows of 72 bytes
    with pytest.raises(ValueError, match="16-byte-aligned"):
        encode_tmap(0x1000, (64, 512, 1), (64, 512, 1))  # a box of 512 rows
    with pytest.raises(ValueError, match="strides"):
        encode_tmap(0x1000, (64, 128, 4), (64, 64, 4), strides=(256, 136))  # a stride off 16 bytes
    with pytest.raises(ValueError, match="strides"):
        encode_tmap(0x1000, (64, 128, 4), (64, 64, 4), strides=(256,))  # one stride short


def test_exported_modules_compile_for_the_devices_own_target(monkeypatch):
    """An exported module (runtime/kernel_api.load) compiles for the device's target with Hopper's "a" suffix:
    CuPy's default (sm_90) cannot assemble wgmma, so a bf16 GEMM's export failed on the H100. Each compilation
    unit gets the same options."""
    import cupy

    from runtime import kernel_api
    seen = []

    class FakeDevice:
        def __init__(self, cc):
            self.compute_capability = cc

    class FakeModule:
        def __init__(self, code, options):
            seen.append(options)

    monkeypatch.setattr(cupy, "RawModule", FakeModule)
    for cc, arch in (("90", "sm_90a"), ("89", "sm_89")):
        seen.clear()
        monkeypatch.setattr(cupy.cuda, "Device", lambda cc=cc: FakeDevice(cc))
        kernel_api.load("// one\n" + kernel_api.MODULE_PART + "\n// two", ["-DX=1"])
        assert len(seen) == 2 and all(o[0] == f"-arch={arch}" and "-DX=1" in o for o in seen), seen
