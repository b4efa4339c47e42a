"""fp32 GEMM of a few rows against weights stored (N, K) (nn.Linear at a small batch: VGG16's classifier, 10 x 25088
by 25088 x 4096, 411 MB of weights): its time is the weights read once, not the multiplies (2 FLOPs a weight a row).
Tensor-core tiles of 128 (or 16) rows there are mostly padding and hold few bytes in flight (0.48 ms for that layer on
the H100, five times its copy floor). Here a warp walks TN weight rows with 16-byte loads, each lane a strided quarter
of the K range, and multiplies them in fp32 FMAs against A's rows held in shared memory (read by the block once); the
lanes' sums meet by shuffles. K is cut into ranges (blockIdx.z) so the grid fills the GPU: their partial products are
summed in range order, with the epilogue, by gemm_tf32's `egg_gemm_splitk` (deterministic, no atomics)."""
from __future__ import annotations

from agents.expert.codegen import CTYPE, PRELUDE
from agents.expert.opgraph import Unsupported
from agents.expert.templates import gemm_tf32
from agents.expert.templates.gemm import GemmKnobs, GemmPlan, epilogue, kernel_args

# Rows of A: each 16 bytes of weights a lane loads cost M / TN shared-memory loads of A and 4 M TN FMAs (M x TN sums in
# registers). At 16 rows the FMAs alone take 64-100 of an SM's 128 a clock at the weights' copy rate: past it, tensor
# cores (16-row tiles) do better.
MAX_M = 16
WARPS = 8
ROWS = 4  # weight rows a warp walks at once (TN): each A element read from shared memory feeds TN FMAs
MIN_RANGE = 256  # K a range sums at least (shorter ranges cost more in partials and shuffles than they gain)
MAX_RANGE = 2048
A_BYTES = 64 * 1024  # A's slice of a range in shared memory (at most): three blocks an SM


def reason(p: GemmPlan) -> str | None:
    """Why the streaming GEMM does not take `p` (None: it does)."""
    if p.dtype != "float32":
        return "fp32 operands"
    if p.b_layout != "nk" or p.a_layout != "mk":
        return "A (M, K) and weights (N, K), both K-contiguous"
    if p.batch != 1 or p.a_batched or p.b_batched:
        return "one matrix, not a batch"
    if p.M > MAX_M:
        return f"at most {MAX_M} rows"
    return None


def vec(p: GemmPlan) -> int:
    return 4 if p.K % 4 == 0 else 1


def design(p: GemmPlan, sms: int) -> dict:
    """The first design: 8 warps a block, TN rows a warp; K ranges of at most MAX_RANGE (and A's slice within
    A_BYTES), more where the row tiles alone would leave the GPU with fewer than two blocks an SM."""
    tiles = -(-p.N // (WARPS * ROWS))
    longest = max(MIN_RANGE, min(MAX_RANGE, A_BYTES // (4 * p.M)))
    ranges = max(-(-p.K // longest), min(-(-2 * sms // tiles), max(1, p.K // MIN_RANGE)))
    return {"family": "gemm_tf32", "stream": True, "WM": 1, "WN": WARPS, "TN": ROWS, "splitk": ranges}


def ranges(p: GemmPlan, k: GemmKnobs) -> tuple[int, int]:
    """(ranges, K a range) as run: gemm_tf32's split-K ranges (multiples of its k-tile), so its reduce kernel sums
    the same partials."""
    return gemm_tf32.splits(p, k)


def shared_bytes(p: GemmPlan, k: GemmKnobs) -> int:
    return p.M * ranges(p, k)[1] * 4


def grid(p: GemmPlan, k: GemmKnobs) -> tuple[int, int, int]:
    return (-(-p.N // (k.WN * k.TN)), 1, ranges(p, k)[0])


def render(g, p: GemmPlan, k: GemmKnobs) -> str:
    if (why := reason(p)) is not None:
        raise Unsupported(f"the streaming GEMM takes {why}")
    if k.WM != 1 or k.TN < 1 or k.WN < 1:
        raise Unsupported("the streaming GEMM: WM 1, WN warps of TN rows")
    M, N, K, R, V = p.M, p.N, p.K, k.TN, vec(p)
    S, KR = ranges(p, k)
    T, CR, VT = k.WN * 32, KR // V, "float4" if V == 4 else "float"
    if S > 1:  # the raw partial product into the workspace (`out` here), egg_gemm_splitk after
        args = "float* __restrict__ out, " + kernel_args(g, p).split(", ", 1)[1]
        store = "out[(long long)blockIdx.z * {MN}LL + (long long)m * {N} + n] = v;".format(MN=M * N, N=N)
        epi = ""
    else:
        args = kernel_args(g, p)
        epi, val = epilogue(g, p, "v", f"((long long)m * {N} + n)", "            ")
        store = f"out[(long long)m * {N} + n] = from_f<{CTYPE[g.output.dtype]}>({val});"
    fma = ("acc[m][r] = fmaf(av.x, wv[r].x, acc[m][r]); acc[m][r] = fmaf(av.y, wv[r].y, acc[m][r]);\n"
           "                acc[m][r] = fmaf(av.z, wv[r].z, acc[m][r]); acc[m][r] = fmaf(av.w, wv[r].w, acc[m][r]);"
           if V == 4 else "acc[m][r] = fmaf(av, wv[r], acc[m][r]);")
    load = "__ldcs(w[r] + c)"  # read once: evict first, so A's slices stay in L2
    src = f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({T}, {max(1, 512 // T)}) egg_gemm({args}) {{  // two blocks an SM
    extern __shared__ {VT} a_s[];  // A's {M} rows over this block's K range
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long k0 = (long long)blockIdx.z * {KR}LL;
    const int cn = (int)min({KR}LL, {K}LL - k0) / {V};  // the range's chunks of {V}
    for (int i = threadIdx.x; i < {M} * cn; i += {T}) {{
        const int m = i / cn, c = i - m * cn;
        a_s[m * {CR} + c] = reinterpret_cast<const {VT}*>(A + (long long)m * {K}LL + k0)[c];
    }}
    __syncthreads();
    const int n0 = (blockIdx.x * {k.WN} + warp) * {R};
    if (n0 >= {N}) return;
    const {VT}* w[{R}];  // rows past N read the last row again and are not stored
#pragma unroll
    for (int r = 0; r < {R}; ++r)
        w[r] = reinterpret_cast<const {VT}*>(B + (long long)min(n0 + r, {N - 1}) * {K}LL + k0);
    float acc[{M}][{R}];
#pragma unroll
    for (int m = 0; m < {M}; ++m)
#pragma unroll
        for (int r = 0; r < {R}; ++r) acc[m][r] = 0.0f;
#pragma unroll {2 if M <= 12 else 1}
    for (int c = lane; c < cn; c += 32) {{  // two steps' loads in flight where the registers allow
        {VT} wv[{R}];
#pragma unroll
        for (int r = 0; r < {R}; ++r) wv[r] = {load};
#pragma unroll
        for (int m = 0; m < {M}; ++m) {{
            const {VT} av = a_s[m * {CR} + c];
#pragma unroll
            for (int r = 0; r < {R}; ++r) {{
                {fma}
            }}
        }}
    }}
#pragma unroll
    for (int m = 0; m < {M}; ++m)
#pragma unroll
        for (int r = 0; r < {R}; ++r) {{
            float v = acc[m][r];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            const int n = n0 + r;
            if (lane == (m * {R} + r) % 32 && n < {N}) {{
{epi}
                {store}
            }}
        }}
}}
"""
    return src + (gemm_tf32.reduce_source(g, p, k) if S > 1 else "")


def describe(p: GemmPlan, k: GemmKnobs) -> str:
    KR = ranges(p, k)[1]
    return (f"GEMM of {p.M} row(s) streaming the weights (fp32 FMAs): a warp walks {k.TN} weight rows "
            f"{'16 bytes' if vec(p) == 4 else '4 bytes'} a lane, block {k.WN * 32}, A's rows over its K range "
            f"({KR}) in shared memory, lanes' sums by shuffles")
