"""The scripted conversation: a malformed reply, a kernel that does not compile, a wrong kernel,
then a correct one, then one reply per tuning stage. Used on the CPU and on the GPU."""
import json

HOST = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = egg.empty(x.shape, x.dtype, x.device)
        egg.launch("relu_k", ((x.numel() + {block} - 1) // {block},), ({block},), [y, x, x.numel()])
        return y
'''
CORRECT = '''extern "C" __global__ void relu_k(float* y, const float* x, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}'''
BROKEN = CORRECT.replace("? 0.0f :", "? undefined_thing :")
WRONG = CORRECT.replace("x[i] < 0.0f ? 0.0f : x[i]", "x[i]")  # forgets the ReLU


def reply(src: str, block: int = 256, plan: str = "") -> str:
    return json.dumps({"plan": plan or f"block {block}", "kernels": [
        {"cuda_source": src, "host_code": HOST.format(block=block), "kernel_names": ["relu_k"],
         "params": {"block": block}, "description": "relu"}]})


REPLIES = [
    "Sure! Here is a great kernel: __global__ void relu(...)",  # not JSON
    reply(BROKEN),
    reply(WRONG),
    reply(CORRECT, plan="one thread per element"),
    reply(CORRECT, 512),  # parallel_mapping
    reply(CORRECT, 128),  # tiling
    reply(CORRECT, 1024),  # memory_optimization
]
