"""A matmul whose output is only summed over its columns, never kept: level 2's "Gemm, scale, sum over
the features" (tasks 14, 18 and 51), with affine steps between (templates/summed.py).

Summed over n, a GEMM row is a dot product with the weight's summed columns:

    sum_n (A @ B + bias)[m, n] = A[m, :] . (sum_n B[:, n]) + sum_n bias[n]

and with a step a[n] * v + b[n] between, the columns summed weighted by a[n] and b[n] summed with the
bias. Two or three kernels: `egg_wsum` reads B once (an (N, K) weight by chunks of rows, folded by
`egg_wfold`) into K sums over n and the bias's sum in a small workspace, then `egg_gemvsum`, a warp
or a block per row of A, takes the dot product with them and applies the steps constant along a row
and the pointwise chain after the sum before its store. 2MNK FLOPs become one read of A and
one of B (memory-bound); exact fp32 sums on the CUDA cores. The weight is summed on every call, so a
changed weight is seen."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import Node, OpGraph, Unsupported, ancestors
from agents.expert.templates.gemm import GemmPlan, plan_of
from agents.expert.templates.summed import coefficients, find_summed, row_index, summed_alone, tensor_operands, varies_along

BLOCK = 256
WARPS = BLOCK // 32
TARGET_BLOCKS = 528  # `egg_wsum`'s blocks over an (N, K) weight: four an H200 SM, enough reads in flight
MIN_ROWS = 16  # rows a block at least: fewer, and the partial sums cost more than they save
ROW_BLOCK_K = 2048  # from this K, a block a row of A in `egg_gemvsum` (a warp a row keeps too few reads in flight)


@dataclass
class GemmSumPlan:
    gemm: GemmPlan
    reduce: Node  # the sum over the GEMM's columns
    chain: list  # pw nodes from the GEMM to the sum, affine steps (templates/summed.py)
    # the steps' tensors vary along the summed columns (never along the rows): a[n] weights B's column
    # sums and b[n] adds to the bias's sum; else they are constant along a row and apply to its sum
    weighted: bool = False

    @property
    def additive(self) -> bool:  # an offset among the steps: applied to the row's mean, times N
        return any(n.op in ("add", "sub", "rsub") for n in self.chain)

    @property
    def vec_a(self) -> bool:  # A's rows and the workspace read 16 bytes at a time
        return self.gemm.dtype == "float32" and self.gemm.K % 4 == 0

    @property
    def strip(self) -> int:  # columns of an (N, K) weight a `egg_wsum` block sums: a thread a column (or four)
        return BLOCK * (4 if self.vec_b else 1)

    @property
    def splits(self) -> int:  # row chunks of an (N, K) weight, each a block's partial sums
        p = self.gemm
        strips = -(-p.K // self.strip)
        return max(1, min(-(-TARGET_BLOCKS // strips), p.N // MIN_ROWS))

    @property
    def row_threads(self) -> int:  # `egg_gemvsum`'s threads a row of A
        return BLOCK if self.gemm.K >= ROW_BLOCK_K else 32

    @property
    def vec_b(self) -> bool:  # B read 16 bytes at a time: along k ("nk") or along n ("kn")
        p = self.gemm
        return p.dtype == "float32" and (p.K if p.b_layout == "nk" else p.N) % 4 == 0


def find(g: OpGraph) -> tuple[Node, Node, list] | None:
    """(matmul, sum, affine steps between): a sum over a matmul's last dim."""
    return find_summed(g, "gemm", lambda gm: (len(gm.shape) - 1,))


def plan_gemm_sum(g: OpGraph) -> GemmSumPlan:
    gm, r, chain = summed_alone(g, find(g), "no matmul summed over its columns", "matmul's row sum")
    p = plan_of(gm)
    if p.batch != 1 or p.a_batched or p.b_batched or p.a_layout != "mk":
        raise Unsupported("a batched or transposed-A matmul's row sum")
    if math.prod(g.output.shape) != p.M:
        raise Unsupported("an output that is not one value a row of the matmul")
    last = len(gm.shape) - 1
    ops = tensor_operands(chain, gm)
    if all(not varies_along(c, gm.shape, [last]) for c in ops):
        if any(id(p.b_src) in ancestors(c) for c in ops):  # the row kernel does not take B
            raise Unsupported("a per-row step computed from the matmul's weight")
        return GemmSumPlan(p, r, chain)
    if all(not varies_along(c, gm.shape, range(last)) for c in ops):
        sp = GemmSumPlan(p, r, chain, weighted=True)
        if any(id(p.a_src) in ancestors(c) for c in ops):  # the column sums' kernels do not take A
            raise Unsupported("a per-column step computed from the matmul's input")
        return sp
    raise Unsupported("a tensor between the matmul and its row sum that varies along both rows and columns")


def _loader(renamed: list[tuple[Node | None, str]]):
    """Reads of a leaf in a generated kernel: those it takes under another argument name ((node, name))
    by that name, the rest by their own."""
    names = {id(n): v for n, v in renamed if n is not None}
    return lambda n, i: f"to_f({names.get(id(n), n.name)}[{i}])"


def coef_leaves(g: OpGraph, sp: GemmSumPlan) -> list[Node]:
    """The leaves the weighted steps' tensors read, in the graph's order (A, B and the bias apart)."""
    seen = set().union(*(ancestors(c) for c in tensor_operands(sp.chain, sp.gemm.gemm))) if sp.weighted else set()
    p = sp.gemm
    return [t for t in g.inputs + g.params if id(t) in seen and t is not p.a_src and t is not p.b_src and t is not p.bias]


def _coefs(sp: GemmSumPlan, idx: str, indent: str) -> tuple[str, str, str]:
    """(statements, a, b) of the weighted steps at column `idx`."""
    em = Emitter(_loader([(sp.gemm.b_src, "B"), (sp.gemm.bias, "bias")]), prefix="c")
    a, b = coefficients(sp.chain, sp.gemm.gemm, em.value, idx)
    return em.take(indent), a, b


def algorithm_flops(sp: GemmSumPlan) -> float:
    """A lower bound of its arithmetic: an add per weight element, then a dot product a row of A."""
    p = sp.gemm
    return float(p.N * p.K + 2 * p.M * p.K)


def wsum_node(sp: GemmSumPlan) -> Node:
    """B summed over n (K floats), then the bias's sum: fp32."""
    return Node(f"{sp.gemm.gemm.name}_wsum", "input", shape=(sp.gemm.K + 1,), dtype="float32")


def wpart_node(sp: GemmSumPlan) -> Node:
    """An (N, K) weight's partial column sums, a row of K a chunk of its rows: fp32."""
    return Node(f"{sp.gemm.gemm.name}_wpart", "input", shape=(sp.splits * sp.gemm.K,), dtype="float32")


def _wsum_kernels(sp: GemmSumPlan, bias_arg: str, coef_args: str) -> str:
    p = sp.gemm
    N, K = p.N, p.K
    b_t = CTYPE[p.b_src.dtype]
    if p.b_layout == "nk":
        # B is (N, K): a block sums a strip of columns over a chunk of rows, each row's strip one contiguous
        # read (a narrow strip over all rows touched a DRAM page 128 bytes at a time: 2 TB/s on the H200);
        # the chunks' partial sums are folded by `egg_wfold`, whose last block sums the bias
        v, S = (4 if sp.vec_b else 1), sp.splits
        rows = -(-N // S)
        pre, wa = "", ""
        if sp.weighted:  # row n of B weighted by a[n]
            pre, ca, _ = _coefs(sp, "n", "        ")
            pre, wa = pre + f"\n        const float wa = {ca};", "wa * "
        if v == 4:
            load = f"const float4 b4 = reinterpret_cast<const float4*>(B + (long long)n * {K} + col)[0];\n" \
                   f"        acc[0] += {wa}b4.x; acc[1] += {wa}b4.y; acc[2] += {wa}b4.z; acc[3] += {wa}b4.w;"
        else:
            load = f"acc[0] += {wa}to_f(B[(long long)n * {K} + col]);"
        return f"""
extern "C" __global__ void __launch_bounds__({BLOCK}) egg_wsum(float* __restrict__ part, const {b_t}* __restrict__ B{coef_args}) {{
    const int col = blockIdx.x * {sp.strip} + threadIdx.x * {v};
    const int n0 = blockIdx.y * {rows}, n1 = min(n0 + {rows}, {N});
    if (col >= {K}) return;
    float acc[{v}];
#pragma unroll
    for (int e = 0; e < {v}; ++e) acc[e] = 0.0f;
#pragma unroll 8
    for (int n = n0; n < n1; ++n) {{
{pre}
        {load}
    }}
#pragma unroll
    for (int e = 0; e < {v}; ++e) part[(long long)blockIdx.y * {K} + col + e] = acc[e];
}}

extern "C" __global__ void __launch_bounds__({BLOCK}) egg_wfold(float* __restrict__ ws, const float* __restrict__ part{bias_arg}{coef_args}) {{
    if (blockIdx.x == gridDim.x - 1) {{  // the last block: the bias's sum
{_bias_sum(sp)}
        return;
    }}
    const int k = blockIdx.x * {BLOCK} + threadIdx.x;
    if (k >= {K}) return;
    float s = 0.0f;
#pragma unroll 8
    for (int c = 0; c < {S}; ++c) s += part[(long long)c * {K} + k];
    ws[k] = s;
}}
"""
    # B is (K, N): row sums, a warp a row, contiguous
    if sp.weighted:  # column n weighted by a[n]
        pre, ca, _ = _coefs(sp, "n", "            ")
        loop = f"""for (int n = lane; n < {N}; n += 32) {{
{pre}
            s += {ca} * to_f(B[(long long)k * {N} + n]);
        }}"""
    elif sp.vec_b:
        loop = f"""const float4* bp = reinterpret_cast<const float4*>(B + (long long)k * {N});
        for (int j = lane; j < {N // 4}; j += 32) {{ const float4 b4 = bp[j]; s += (b4.x + b4.y) + (b4.z + b4.w); }}"""
    else:
        loop = f"for (int n = lane; n < {N}; n += 32) s += to_f(B[(long long)k * {N} + n]);"
    return f"""
extern "C" __global__ void __launch_bounds__({BLOCK}) egg_wsum(float* __restrict__ ws, const {b_t}* __restrict__ B{bias_arg}{coef_args}) {{
    if (blockIdx.x == gridDim.x - 1) {{  // the last block: the bias's sum
{_bias_sum(sp)}
        return;
    }}
    const int k = blockIdx.x * {WARPS} + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (k >= {K}) return;
    float s = 0.0f;
    {{
        {loop}
    }}
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) ws[k] = s;
}}
"""


def _bias_sum(sp: GemmSumPlan) -> str:
    bias = sp.gemm.bias
    if sp.weighted:  # sum_n (a[n] bias[n] + b[n])
        pre, ca, cb = _coefs(sp, "n", "            ")
        term = f"{ca} * to_f(bias[n]) + {cb}" if bias is not None else cb
        body = f"{{\n{pre}\n            s += {term};\n        }}"
    elif bias is None:
        return f"        if (threadIdx.x == 0) ws[{sp.gemm.K}] = 0.0f;"
    else:
        body = "s += to_f(bias[n]);"
    return f"""        float s = 0.0f;
        for (int n = threadIdx.x; n < {sp.gemm.N}; n += {BLOCK}) {body}
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        __shared__ float wsum_b[{WARPS}];
        if ((threadIdx.x & 31) == 0) wsum_b[threadIdx.x >> 5] = s;
        __syncthreads();
        if (threadIdx.x == 0) {{
            float t = 0.0f;
            for (int w = 0; w < {WARPS}; ++w) t += wsum_b[w];
            ws[{sp.gemm.K}] = t;
        }}"""


def render(g: OpGraph, sp: GemmSumPlan) -> str:
    p = sp.gemm
    K, M = p.K, p.M
    a, bias = p.a_src, p.bias
    bias_arg = f", const {CTYPE[bias.dtype]}* __restrict__ bias" if bias is not None else ""
    coef_args = "".join(f", const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in coef_leaves(g, sp))
    wsum = _wsum_kernels(sp, bias_arg, coef_args)
    # the steps on the row's sum (linear: the chain of the sum), on its mean times N (with offsets), or
    # already in the column sums (weighted)
    acc_name = "g_mean" if sp.additive and not sp.weighted else "g_sum"
    em = Emitter(_loader([(p.a_src, "A")]),
                 lambda n: acc_name if n is p.gemm else ("r_val" if n is sp.reduce else None), prefix="e")
    last = len(p.gemm.shape) - 1
    scaled = "g_sum" if sp.weighted or not sp.chain else em.value(sp.chain[-1], row_index(p.gemm, [last]))
    mean = ""
    if acc_name == "g_mean":
        scaled, mean = f"({scaled}) * {float(p.N)!r}f", f"\n    const float g_mean = g_sum / {float(p.N)!r}f;"
    pre = em.take("        ")
    v_out = em.value(g.output, "o_lin")
    post = em.take("        ")
    rest_args = "".join(f", const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in arg_order(g, sp)[2:])
    T = sp.row_threads
    if sp.vec_a:
        dot = f"""const float4* ap = reinterpret_cast<const float4*>(A + o_lin * {K}LL);
    const float4* wp = reinterpret_cast<const float4*>(ws);
#pragma unroll 8
    for (int j = t; j < {K // 4}; j += {T}) {{
        const float4 x = ap[j], w = wp[j];
        acc = fmaf(x.x, w.x, acc); acc = fmaf(x.y, w.y, acc); acc = fmaf(x.z, w.z, acc); acc = fmaf(x.w, w.w, acc);
    }}"""
    else:
        dot = f"""const {CTYPE[a.dtype]}* ap = A + o_lin * {K}LL;
#pragma unroll 8
    for (int k = t; k < {K}; k += {T}) acc = fmaf(to_f(ap[k]), ws[k], acc);"""
    if T > 32:  # a block a row: the warps' sums through shared memory
        fold = f"""__shared__ float red[{WARPS}];
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x != 0) return;
    acc = 0.0f;
#pragma unroll
    for (int w = 0; w < {WARPS}; ++w) acc += red[w];"""
    else:
        fold = "if (t != 0) return;"
    gemv = f"""
extern "C" __global__ void __launch_bounds__({BLOCK}) egg_gemvsum(
    {CTYPE[g.output.dtype]}* __restrict__ out, const float* __restrict__ ws, const {CTYPE[a.dtype]}* __restrict__ A{rest_args}) {{
    const long long o_lin = (long long)blockIdx.x * {BLOCK // T} + threadIdx.x / {T};  // {T} threads a row of A
    const int t = threadIdx.x % {T};
    if (o_lin >= {M}LL) return;
    float acc = 0.0f;
    {dot}
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    {fold}
    // the row's sum over the GEMM's {p.N} columns; the affine steps apply to it
    const float g_sum = acc + ws[{K}];{mean}
{pre}
    const float r_val = {scaled};
{post}
    out[o_lin] = from_f<{CTYPE[g.output.dtype]}>({v_out});
}}
"""
    return PRELUDE + wsum + gemv


def arg_order(g: OpGraph, sp: GemmSumPlan) -> list[Node]:
    """`egg_gemvsum`'s tensors after `out`: the workspace, A, then the other leaves it reads."""
    a, b = sp.gemm.a_src, sp.gemm.b_src
    return [wsum_node(sp), a] + [t for t in g.inputs + g.params if t is not a and t is not b]


def launches(g: OpGraph, sp: GemmSumPlan) -> list[tuple[str, tuple, tuple, list, Node | None]]:
    """(kernel, grid, block, tensors after its output, the node it writes; None: the output), in order."""
    p = sp.gemm
    coef = coef_leaves(g, sp)
    b_reads = [p.b_src] + ([p.bias] if p.bias is not None else []) + coef
    gemv = ("egg_gemvsum", (-(-p.M // (BLOCK // sp.row_threads)),), (BLOCK,), arg_order(g, sp), None)
    if p.b_layout == "nk":  # partial column sums over chunks of rows, then their fold (and the bias's sum)
        return [("egg_wsum", (-(-p.K // sp.strip), sp.splits), (BLOCK,), [p.b_src] + coef, wpart_node(sp)),
                ("egg_wfold", (-(-p.K // BLOCK) + 1,), (BLOCK,), [wpart_node(sp)] + b_reads[1:], wsum_node(sp)),
                gemv]
    return [("egg_wsum", (-(-p.K // WARPS) + 1,), (BLOCK,), b_reads, wsum_node(sp)), gemv]
