"""Planted candidates for the verifier: one honest kernel and the cheats and faults it must catch."""
from state import KernelCandidate

RELU = r'''
extern "C" __global__ void relu(float* y, const float* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];  // a NaN kept, as torch.relu keeps it
}
extern "C" __global__ void relu_fmaxf(float* y, const float* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);  // a NaN becomes 0
}
extern "C" __global__ void relu_half(float* y, const float* x, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n / 2) y[i] = x[i] < 0.0f ? 0.0f : x[i];  // a NaN kept, as torch.relu keeps it
}
extern "C" __global__ void relu_oob(float* y, const float* x, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i + (1LL << 40)] = x[i] < 0.0f ? 0.0f : x[i];
}
extern "C" __global__ void spin(float* y, const float* x, long long n) {
    // a side-effect-free infinite loop may be deleted by the compiler: sleep inside it
    for (;;) { __nanosleep(1000); }
}
extern "C" __global__ void copy(float4* __restrict__ y, const float4* __restrict__ x, long long n4) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n4) y[i] = x[i];
}
'''

HONEST = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        return y
'''
DROPS_NAN = HONEST.replace('"relu"', '"relu_fmaxf"')
SKIPS_HALF = HONEST.replace('"relu"', '"relu_half"').replace("(1056,)", "((x.numel() // 2 + 255) // 256,)")
CALLS_TORCH = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        return torch.relu(x)
'''
CACHES = '''
class ModelNew(nn.Module):
    def forward(self, x):
        if not hasattr(self, "cached"):
            self.cached = egg.empty(x.shape, x.dtype, x.device)
            egg.launch("relu", (1056,), (256,), [self.cached, x, x.numel()])
        else:
            egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return self.cached
'''
OUT_OF_BOUNDS = HONEST.replace('"relu"', '"relu_oob"').replace("(1056,)", "((x.numel() + 255) // 256,)")
HANGS = HONEST.replace('"relu"', '"spin"').replace("(1056,)", "(1,)")
SIDE_STREAM = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        if not hasattr(self, "side"):
            self.side = torch.cuda.Stream()
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            for _ in range(20):
                egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return y
'''
COPY = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("copy", ((x.numel() // 4 + 255) // 256,), (256,), [y, x, x.numel() // 4])
        return y
'''
BROKEN = 'extern "C" __global__ void relu(float* y) { y[0] = undefined_name; }'


def cand(cid: str, host: str, source: str = RELU, names=None) -> KernelCandidate:
    return KernelCandidate(id=cid, stage="algorithm_design", cuda_source=source, host_code=host,
                           kernel_names=names or ["relu"])


# -- issues 14 and 21: ways past the verifier. Each must end rejected or incorrect, naming why. -------------
NOOP = r'''
extern "C" __global__ void noop(float* y, const float* x, long long n) { if (n < 0) y[0] = x[0]; }
'''
MEMO_VERSION = '''
class ModelNew(nn.Module):
    def forward(self, x):
        key = (x.data_ptr(), x._version)
        if getattr(self, "key", None) == key:
            egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 0])
            return self.memo
        self.memo = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu", (1056,), (256,), [self.memo, x, x.numel()])
        self.key = key
        return self.memo
'''
# allowed syntax: only the dynamic checks (fresh inputs while timed, timed calls checked) can catch it
MEMO_POINTER = '''
class ModelNew(nn.Module):
    def forward(self, x):
        if not hasattr(self, "memo"):
            self.memo = {}
        key = x.data_ptr()
        if key in self.memo and self.memo[key].shape == x.shape:
            y = egg.empty((32,), x.dtype, x.device)
            egg.launch("relu", (1,), (32,), [y, x, 0])
            return self.memo[key].view(x.shape)
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        self.memo[key] = y
        return y
'''
# honest for the first calls (the correctness trials), then skips the work: a call counter
COUNTS_CALLS = '''
class ModelNew(nn.Module):
    def forward(self, x):
        self.calls = getattr_calls = (self.calls + 1) if hasattr(self, "calls") else 1
        y = egg.empty(x.shape, x.dtype, x.device)
        if getattr_calls <= 6:
            egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        else:
            egg.launch("relu", (1,), (32,), [y, x, 32])
        return y
'''
PATCHES_TIMER = '''
torch.cuda.Event.elapsed_time = lambda self, other: 0.0001
''' + HONEST
PATCHES_TIMER_HIDDEN = '''
ev = torch.cuda.Event
ev.elapsed_time = lambda self, other: 0.0001
''' + HONEST
CUPY_MATMUL = '''
import cupy
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return torch.from_dlpack(cupy.maximum(cupy.from_dlpack(x), 0))
'''
CUPY_STREAM = '''
import cupy
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        s = cupy.cuda.Stream(non_blocking=True)
        k = egg.kernel("relu")
        for _ in range(10):
            k((1056,), (256,), (y, x, x.numel()), stream=s)
        return y
'''
COPY_AS_RELU = COPY  # right on torch.rand inputs (all >= 0), wrong on signed ones
SETS_INPUT = '''
class ModelNew(nn.Module):
    def forward(self, x):
        self.n = self.n + 1 if hasattr(self, "n") else 1
        if self.n > 4:
            x.set_(torch.zeros_like(x))
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        return y
'''
LAZY_SUBCLASS = '''
class Lazy(torch.Tensor):
    pass
class ModelNew(nn.Module):
    def forward(self, x):
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return x.as_subclass(Lazy)
'''
DISABLES_DISPATCH = '''
class ModelNew(nn.Module):
    def forward(self, x):
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        with torch._C._DisableTorchDispatch():
            return torch.relu(x)
'''
# mixed: the op under another name, and a dummy launch of its own
RENAMED_OP = '''
class ModelNew(nn.Module):
    def forward(self, x):
        egg.launch("noop", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return torch.clamp_min(x, 0.0)
'''
READS_FRAMES = '''
import sys
class ModelNew(nn.Module):
    def forward(self, x):
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return sys._getframe(1).f_locals["eager"][0].clone()
'''
READS_FRAMES_INSPECT = '''
import inspect
class ModelNew(nn.Module):
    def forward(self, x):
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return inspect.stack()[1].frame.f_locals["eager"][0].clone()
'''
REBINDS_VERIFIER = '''
import runtime.correctness
runtime.correctness.float64_rule = lambda *a, **k: ""
''' + HONEST
SLOWS_BASELINE = '''
orig = nn.Module.__call__
nn.Module.__call__ = lambda self, *a, **k: (torch.cuda._sleep(10**7), orig(self, *a, **k))[1]
''' + HONEST
RETURNS_INPUT = '''
class ModelNew(nn.Module):
    def forward(self, x):
        egg.launch("relu", (1,), (32,), [egg.empty((32,), x.dtype, x.device), x, 32])
        return x
'''
READS_POISON = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu" if egg.poison else "relu_half", (1056,), (256,), [y, x, x.numel()])
        return y
'''
THREAD_AFTER = '''
import threading
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        threading.Timer(0.01, lambda: egg.launch("relu", (1056,), (256,), [y, x, x.numel()])).start()
        return y
'''
GETATTR_BY_STRING = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        p = getattr(egg, "poi" + "son")
        egg.launch("relu", (1056,), (256,), [y, x, x.numel()])
        return y
'''
FLIPS_TF32 = '''
torch.backends.cuda.matmul.allow_tf32 = True
''' + HONEST

# (name, host code, policy, what the rejection must say), stopped by the host-code policy before running
POLICY_CHEATS = [
    ("memo_version", MEMO_VERSION, "strict", "_version"),
    ("patches_timer", PATCHES_TIMER, "strict", ".elapsed_time"),
    ("patches_timer_hidden", PATCHES_TIMER_HIDDEN, "strict", ".Event"),
    ("cupy_matmul", CUPY_MATMUL, "strict", "imports cupy"),
    ("cupy_matmul_mixed", CUPY_MATMUL, "mixed", "imports cupy"),
    ("cupy_stream", CUPY_STREAM, "strict", "imports cupy"),
    ("sets_input", SETS_INPUT, "strict", ".set_"),
    ("lazy_subclass", LAZY_SUBCLASS, "strict", "class Lazy(torch.Tensor)"),
    ("disables_dispatch", DISABLES_DISPATCH, "mixed", "._DisableTorchDispatch"),
    ("reads_frames", READS_FRAMES, "strict", "imports sys"),
    ("reads_frames_inspect", READS_FRAMES_INSPECT, "mixed", "imports inspect"),
    ("rebinds_verifier", REBINDS_VERIFIER, "strict", "imports runtime.correctness"),
    ("slows_baseline", SLOWS_BASELINE, "mixed", "__call__"),
    ("reads_poison", READS_POISON, "strict", ".poison"),
    ("thread_after", THREAD_AFTER, "strict", "imports threading"),
    ("getattr_by_string", GETATTR_BY_STRING, "strict", "uses getattr"),
    ("flips_tf32", FLIPS_TF32, "mixed", "assigns .allow_tf32"),
]
