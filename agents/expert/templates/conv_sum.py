"""A convolution whose output is only summed (or averaged) over all its spatial positions, never kept:
level 2's "conv, then a global average pool" with affine steps between whose tensors are constant over
the positions (a scaling, an eval BatchNorm: templates/summed.py).

Summed over the output, every tap of the kernel meets the input over a box (per dim an interval of
input positions, from stride, padding, dilation and output_padding), so

    sum_o y[n, oc, o] = |out| * bias[oc] + sum_ic sum_tap W[.., tap] * boxsum(x[n, ic], tap)

Two or three kernels: `egg_boxsum`, a block per input plane (n, ic) reading it once and summing it per
distinct box (most elements lie inside every tap's box and take one add); where a box covers 4+ taps,
`egg_wbox` sums the weight per box; then `egg_convsum`, a warp per (n, oc) contracting the sums with the
weight, applying the affine steps and the pointwise chain after the sum
before its store. The conv's FLOPs and its output's write and read are gone; exact fp32."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import Node, OpGraph, Unsupported, ancestors
from agents.expert.templates.conv import ConvPlan, plan_of
from agents.expert.templates.summed import find_summed, row_index, summed_alone, tensor_operands, varies_along

PER_BOX_RATIO = 4  # taps a box at least for the weight to be summed per box first (unmeasured: RESULTS.md)
MAX_TAPS = 64  # distinct boxes: a thread's per-box sums live in registers


@dataclass
class ConvSumPlan:
    conv: ConvPlan
    reduce: Node  # the sum over the spatial dims
    chain: list  # pw nodes from the conv to the sum, affine steps constant over the conv's positions

    @property
    def taps(self) -> int:
        return math.prod(self.conv.ker)

    def distinct(self, d: int) -> list[tuple[int, int]]:
        """Dim d's distinct tap boxes: taps whose boxes are equal share one sum (a stride-1 transposed
        conv without padding: every tap's box is the whole plane)."""
        return sorted({self.box(d, k) for k in range(self.conv.ker[d])})

    @property
    def boxes(self) -> int:  # the distinct boxes of the whole kernel: a thread's sums in registers
        return math.prod(len(self.distinct(d)) for d in range(self.conv.nd))

    @property
    def per_box(self) -> bool:
        """Far fewer boxes than taps: the weight is summed per box (`egg_wbox`, once a call rather than once
        an image) and the contraction runs over boxes; else over taps, the weight read as it is (a third
        launch, a few microseconds, would cost what a 2x shorter contraction saves)."""
        return self.boxes * PER_BOX_RATIO <= self.taps

    @property
    def sums(self) -> int:  # the box sums a plane: one a box, or one a tap
        return self.boxes if self.per_box else self.taps

    def box(self, d: int, k: int) -> tuple[int, int]:
        """The input positions along dim d (inclusive bounds; lo > hi: none) that tap k sends into the output."""
        p = self.conv
        s, pad, dil, n_in, n_out = p.stride[d], p.pad[d], p.dil[d], p.in_sp[d], p.out_sp[d]
        if p.transposed:  # o = i * s - pad + k * dil
            lo, hi = -((k * dil - pad) // s), (n_out - 1 + pad - k * dil) // s
        else:  # stride 1: o = i + pad - k * dil
            lo, hi = k * dil - pad, k * dil - pad + n_out - 1
        return max(lo, 0), min(hi, n_in - 1)


def find(g: OpGraph) -> tuple[Node, Node, list] | None:
    """(conv, sum, affine steps between): a sum over all of a conv's spatial dims."""
    return find_summed(g, "conv", lambda cv: range(2, len(cv.shape)))


def plan_conv_sum(g: OpGraph) -> ConvSumPlan:
    cv, r, chain = summed_alone(g, find(g), "no convolution summed over its spatial dims", "conv's spatial sum")
    p = plan_of(cv)
    ops = tensor_operands(chain, cv)
    if any(varies_along(c, cv.shape, range(2, len(cv.shape))) for c in ops):
        raise Unsupported("a tensor between the conv and its spatial sum that varies over the positions")
    if any({id(cv.args[0]), id(cv.args[1])} & ancestors(c) for c in ops):  # the contraction takes neither
        raise Unsupported("a step between the conv and its spatial sum computed from the conv's input or weight")
    if not p.transposed and any(s != 1 for s in p.stride):
        raise Unsupported("a strided forward conv's spatial sum (its taps meet strided sets, not boxes)")
    if math.prod(g.output.shape) != p.N * p.OC:
        raise Unsupported("an output that is not one value a (image, channel)")
    cp = ConvSumPlan(p, r, chain)
    if cp.boxes > MAX_TAPS:
        raise Unsupported(f"a {p.ker} kernel whose taps meet {cp.boxes} distinct boxes (at most {MAX_TAPS})")
    return cp


def algorithm_flops(cp: ConvSumPlan) -> float:
    """A lower bound of its arithmetic: an add per input element, then the (image, channel) contraction."""
    p = cp.conv
    return float(p.N * p.C * math.prod(p.in_sp) + 2 * p.N * p.OC * p.Cg * cp.sums)


def box_node(cp: ConvSumPlan) -> Node:
    """The per-plane sums, a box or a tap each: (N, C, sums), fp32."""
    p = cp.conv
    return Node(f"{p.conv.name}_box", "input", shape=(p.N, p.C, cp.sums), dtype="float32")


def wbox_node(cp: ConvSumPlan) -> Node:
    """The weight summed over each box's taps: (OC, C / groups, boxes), fp32."""
    p = cp.conv
    return Node(f"{p.conv.name}_wbox", "input", shape=(p.OC, p.Cg, cp.boxes), dtype="float32")


BOX_BLOCK, SUM_BLOCK, UNROLL = 256, 128, 4


def render(g: OpGraph, cp: ConvSumPlan) -> str:
    p, T = cp.conv, cp.taps
    P = math.prod(p.in_sp)
    ks = [list(range(k)) for k in p.ker]
    # per dim: the positions inside every tap's box (one add), and each tap's own bounds
    inner = [(max(cp.box(d, k)[0] for k in ks[d]), min(cp.box(d, k)[1] for k in ks[d])) for d in range(p.nd)]
    dec, rest = [], "e"
    for d in reversed(range(p.nd)):
        dec.append(f"const int i{d} = (int)({rest} % {p.in_sp[d]});")
        rest = f"({rest} / {p.in_sp[d]})"
    dist = [cp.distinct(d) for d in range(p.nd)]
    D = cp.boxes
    flags = [f"const bool m{d}_{j} = i{d} >= {lo} && i{d} <= {hi};" for d in range(p.nd) for j, (lo, hi) in enumerate(dist[d])]
    taps = [f"if ({' && '.join(f'm{d}_{j}' for d, j in enumerate(combo))}) acc[{c}] += v;"
            for c, combo in enumerate(_product([list(range(len(x))) for x in dist]))]
    if cp.per_box:  # the boxes' sums as they are
        tail = f"""    if (threadIdx.x < {D}) bsum[(long long)blockIdx.x * {D} + threadIdx.x] = csum[threadIdx.x];"""
    else:  # a tap's box: its index along each dim looked up, mixed radix over the dims' distinct boxes (first slowest)
        tables = "".join("\n        " + t for t in _box_tables(cp))
        kdec, rest, terms = [], "t", []
        for d in reversed(range(p.nd)):
            kdec.append(f"const int k{d} = {rest} % {p.ker[d]};")
            rest = f"({rest} / {p.ker[d]})"
            terms.append(f"ix{d}[k{d}] * {math.prod(len(x) for x in dist[d + 1:])}")
        cmap = "\n            ".join(kdec) + f"\n            const int c = {' + '.join(terms)};"
        tail = f"""    __syncthreads();
    {{  // each tap's sum: its box's{tables}
        for (int t = threadIdx.x; t < {T}; t += blockDim.x) {{
            {cmap}
            bsum[(long long)blockIdx.x * {T} + t] = csum[c];
        }}
    }}"""
    interior = " && ".join(f"i{d} >= {lo} && i{d} <= {hi}" for d, (lo, hi) in enumerate(inner))
    body = "\n".join("                " + x for x in dec + [f"if ({interior}) {{ tot += v; continue; }}"] + flags + taps)
    box = f"""
extern "C" __global__ void __launch_bounds__({BOX_BLOCK}) egg_boxsum(float* __restrict__ bsum, const float* __restrict__ X) {{
    const float* xp = X + (long long)blockIdx.x * {P}LL;  // plane (n, ic)
    float tot = 0.0f, acc[{D}];
#pragma unroll
    for (int t = 0; t < {D}; ++t) acc[t] = 0.0f;
    for (long long e0 = threadIdx.x; e0 < {P}LL; e0 += {UNROLL}LL * blockDim.x) {{
        float vs[{UNROLL}];
#pragma unroll
        for (int u = 0; u < {UNROLL}; ++u) {{ const long long e = e0 + (long long)u * blockDim.x; vs[u] = e < {P}LL ? xp[e] : 0.0f; }}
#pragma unroll
        for (int u = 0; u < {UNROLL}; ++u) {{
            const long long e = e0 + (long long)u * blockDim.x;
            if (e >= {P}LL) break;
            const float v = vs[u];
            {{
{body}
            }}
        }}
    }}
    // the block's sums: a warp's by shuffles, then the warps' through shared memory
    __shared__ float part[{D + 1}][{BOX_BLOCK // 32}];
    __shared__ float csum[{D}];
    for (int s = 16; s > 0; s >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, s);
#pragma unroll
    for (int t = 0; t < {D}; ++t)
        for (int s = 16; s > 0; s >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], s);
    if ((threadIdx.x & 31) == 0) {{
        part[{D}][threadIdx.x >> 5] = tot;
#pragma unroll
        for (int t = 0; t < {D}; ++t) part[t][threadIdx.x >> 5] = acc[t];
    }}
    __syncthreads();
    if (threadIdx.x < {D}) {{
        float a = 0.0f, b = 0.0f;
        for (int w = 0; w < {BOX_BLOCK // 32}; ++w) {{ a += part[threadIdx.x][w]; b += part[{D}][w]; }}
        csum[threadIdx.x] = a + b;
    }}
{tail}
}}
"""
    count = math.prod(p.out_sp)
    bias = p.bias
    em = Emitter(lambda n, idx: f"to_f({n.name}[{idx}])",
                 lambda n: "c_mean" if n is p.conv else ("r_val" if n is cp.reduce else None), prefix="e")
    # the chain at the (image, channel)'s first position: its tensors do not vary over the positions
    scaled = em.value(cp.chain[-1], row_index(p.conv, range(2, p.nd + 2))) if cp.chain else "c_mean"
    pre = em.take("        ")
    v_out = em.value(g.output, "o_lin")
    post = em.take("        ")
    S = cp.sums
    wi = (f"(long long)oc * {p.Cg * S} + j" if cp.per_box or not p.transposed else
          f"(((long long)grp * {p.Cg} + ic) * {p.OCg} + oc % {p.OCg}) * {T} + t")
    rest_args = "".join(f", const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in arg_order(g, cp)[2:])
    # a warp an (image, channel): its lanes over the (input channel, tap) pairs, both reads contiguous (a
    # thread each left 2048 threads on the H200 at level 2 task 44's size: 0.05 ms, latency-bound)
    contract = f"""
extern "C" __global__ void __launch_bounds__({SUM_BLOCK}) egg_convsum(
    {CTYPE[g.output.dtype]}* __restrict__ out, const float* __restrict__ bsum, const float* __restrict__ W{rest_args}) {{
    const long long o_lin = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (o_lin >= {p.N * p.OC}LL) return;
    const int oc = (int)(o_lin % {p.OC}), grp = oc / {p.OCg};
    const long long n = o_lin / {p.OC};
    const float* bp = bsum + (n * {p.C} + (long long)grp * {p.Cg}) * {S};
    float acc = 0.0f;
#pragma unroll 4
    for (int j = lane; j < {p.Cg * S}; j += 32) {{
        {f"const int ic = j / {T}, t = j - ic * {T};" if p.transposed and not cp.per_box else ""}
        acc = fmaf(W[{wi}], bp[j], acc);
    }}
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane != 0) return;
    // the conv's mean over its {count} output positions, the affine steps on it, times the count: the sum
    const float c_mean = acc / {float(count)!r}f{f' + to_f({bias.name}[oc])' if bias is not None else ''};
{pre}
    const float r_val = {scaled} * {float(count)!r}f;
{post}
    out[o_lin] = from_f<{CTYPE[g.output.dtype]}>({v_out});
}}
"""
    return PRELUDE + box + (_wbox(cp, dist) if cp.per_box else "") + contract


WBOX_BLOCK = 256


def _box_tables(cp: ConvSumPlan) -> list[str]:
    """Per dim d, `ix<d>`: each tap's index among the dim's distinct boxes."""
    p = cp.conv
    return [f"const int ix{d}[{p.ker[d]}] = {{{', '.join(str(cp.distinct(d).index(cp.box(d, k))) for k in range(p.ker[d]))}}};"
            for d in range(p.nd)]


def _wbox(cp: ConvSumPlan, dist: list) -> str:
    """`egg_wbox`: a thread per (oc, ic, box) sums the weight over the box's taps, in the contraction's layout."""
    p, D = cp.conv, cp.boxes
    wi = (f"(((long long)grp * {p.Cg} + ic) * {p.OCg} + oc % {p.OCg}) * {cp.taps} + t" if p.transposed else
          f"((long long)oc * {p.Cg} + ic) * {cp.taps} + t")
    lines, rest = [], "c"
    for d in reversed(range(p.nd)):  # the box's index along each dim (mixed radix, the last dim fastest)
        lines.append(f"const int j{d} = {rest} % {len(dist[d])};")
        rest = f"({rest} / {len(dist[d])})"
    lines += _box_tables(cp)
    loops, close, ind = "", "", "    "
    for d in range(p.nd):
        loops += f"{ind}for (int k{d} = 0; k{d} < {p.ker[d]}; ++k{d}) {{\n{ind}    if (ix{d}[k{d}] != j{d}) continue;\n"
        close = f"{ind}}}\n" + close
        ind += "    "
    tap = "k0"
    for d in range(1, p.nd):
        tap = f"({tap}) * {p.ker[d]} + k{d}"
    body = "\n    ".join(lines)
    return f"""
extern "C" __global__ void __launch_bounds__({WBOX_BLOCK}) egg_wbox(float* __restrict__ wb, const float* __restrict__ W) {{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // (oc, ic, box)
    if (e >= {p.OC * p.Cg * D}LL) return;
    const int c = (int)(e % {D}), ic = (int)((e / {D}) % {p.Cg}), oc = (int)(e / {p.Cg * D}), grp = oc / {p.OCg};
    {body}
    float s = 0.0f;
{loops}{ind}const int t = {tap};
{ind}s += W[{wi}];
{close}    wb[e] = s;
}}
"""


def _product(ks: list[list[int]]) -> list[tuple]:
    out = [()]
    for k in ks:
        out = [c + (x,) for c in out for x in k]
    return out


def arg_order(g: OpGraph, cp: ConvSumPlan) -> list[Node]:
    """`egg_convsum`'s tensors after `out`: the box sums, the weight, then the other leaves it reads."""
    x, w = cp.conv.conv.args[0], cp.conv.conv.args[1]
    return [box_node(cp), wbox_node(cp) if cp.per_box else w] + [t for t in g.inputs + g.params if t is not x and t is not w]


def launches(g: OpGraph, cp: ConvSumPlan) -> list[tuple[str, tuple, tuple, list, Node | None]]:
    """(kernel, grid, block, tensors after its output, the node it writes; None: the output), in order."""
    p = cp.conv
    wbox = [("egg_wbox", (-(-(p.OC * p.Cg * cp.boxes) // WBOX_BLOCK),), (WBOX_BLOCK,), [p.conv.args[1]], wbox_node(cp))]
    return [("egg_boxsum", (p.N * p.C,), (BOX_BLOCK,), [p.conv.args[0]], box_node(cp))] + (wbox if cp.per_box else []) + \
        [("egg_convsum", (-(-(p.N * p.OC * 32) // SUM_BLOCK),), (SUM_BLOCK,), arg_order(g, cp), None)]
