"""Planted candidates for the verifier: one honest kernel and the cheats and faults it must catch."""
from state import KernelCandidate

RELU = r'''
extern "C" __global__ void relu(float* y, const float* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
extern "C" __global__ void relu_half(float* y, const float* x, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n / 2) y[i] = fmaxf(x[i], 0.0f);
}
extern "C" __global__ void relu_oob(float* y, const float* x, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i + (1LL << 40)] = fmaxf(x[i], 0.0f);
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
