"""Attention in one kernel: out = P V with P = softmax(f(Q K^T)) along the keys (or P = h(Q K^T), an
elementwise h such as ReLU attention's), the scores never written to memory.

`fuse` finds the pattern in an op graph after lowering: a batched matmul S = Q K^T, a pointwise chain f
on S (the scale, a masked_fill from a buffer: anything elementwise that reads S and leaves only), the
softmax as `_softmax` lowers it (or no reduction at all) and a second batched matmul with V; it replaces
the second matmul by one `attention` node. Eager and a program of kernels write the (n, L, S) scores
and read them back three times: KernelBench level 3 task 31's 8 x 16384 x 16384 floats are 8.6 GB.

The kernel (FlashAttention-2's schedule on mma.sync): a block of 4 warps takes 64 query rows, a warp 16,
and walks the keys in tiles of 64. S's tile comes from 3xTF32 MMAs (Q and K tiles in shared memory,
each operand split into TF32 high and low parts: fp32 grade, as eager's fp32 matmul is); f is applied to
each score at its own (batch, row, key) index; the online softmax keeps a running max and sum per row
in registers (the output rescaled when the max grows). P goes into the second MMA straight from the
first one's accumulator registers: the m16n8k8 accumulator holds keys 2t and 2t+1 of a row where the A
operand wants keys t and t + 4, so the k index is read as the key order 0 2 4 6 1 3 5 7 and V's rows
are loaded in that order (no shuffles). Each key tile's P V goes to its own accumulator and is added to
the output in fp32 (the MMA's truncating accumulation over 16384 keys drifts: gemm_tf32's note).
Tiles arrive by cp.async, the next one in flight under this one's MMAs where two blocks an SM still fit
(`ring`). Where the chain is a masked_fill with -inf from a mask of leaves (a causal mask from a buffer), a
key tile masked for all of a block's rows is skipped (the tiles above the diagonal)."""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import REMAPS, Node, OpGraph, Unsupported, _flat, ancestors, unview
from agents.expert.templates.gemm import _batched_source
from agents.expert.templates.gemm_tf32 import TF32_PRELUDE

BM = 64  # query rows a block (16 a warp)
BN = 64  # keys a tile
THREADS = 128
MAX_HEAD = 128  # head dims the registers hold (S tile 32, the output 2 x head / 8 x 4)


# -- finding it ----------------------------------------------------------------------------------------
def fuse(g: OpGraph) -> OpGraph:
    """`g` with each attention pattern's second matmul replaced by an `attention` node (the scores' chain
    kept in its attrs, off the node list); `g` itself where there is none."""
    readers = g.readers()
    pos = {id(n): i for i, n in enumerate(g.nodes)}
    swap: dict[int, Node] = {}
    for n in g.nodes:
        if n.kind == "gemm" and n.op == "bmm" and n.args[2] is None:
            got = _match(n, readers, pos, g.output)
            if got is not None:
                swap[id(n)] = got
    if not swap:
        return g

    def remap(a):
        if isinstance(a, (list, tuple)):
            return type(a)(remap(x) for x in a)
        return swap.get(id(a), a) if isinstance(a, Node) else a
    for n in g.nodes:  # readers of a replaced matmul read the attention node (same shape, same values)
        if id(n) not in swap and n.kind not in ("input", "param"):
            n.args = [remap(a) for a in n.args]
    out = swap.get(id(g.output), g.output)
    nodes = [swap.get(id(n), n) for n in g.nodes]
    live = ancestors(out)
    return OpGraph(nodes=[n for n in nodes if id(n) in live or n.kind == "input"], inputs=g.inputs,
                   params=[p for p in g.params if id(p) in live], output=out, aten_ops=g.aten_ops, scalars=g.scalars)


def _match(mm2: Node, readers: dict[int, list[Node]], pos: dict[int, int], output: Node) -> Node | None:
    """The attention node for second matmul `mm2`, or None where its A operand is not P of the pattern."""
    v, views, p = mm2.args[1], [], mm2.args[0]
    while isinstance(p, Node) and p.kind == "pw" and p.op == "view":  # P as the matmul reads it, merged batch dims
        views.append(p)
        p = p.args[0]
    if not isinstance(p, Node):
        return None
    if len(mm2.shape) != 3 or len(v.shape) != 3:
        return None
    # the region between the first matmul and P: P's ancestors up to (not through) a matmul, or a tensor computed from
    # parameters alone (Swin V2's position-bias MLP on a buffer: an input of the kernel, computed by a stage before)
    region, stack, mm1, computed, of_params = {}, [p], None, {}, {}
    while stack:
        x = stack.pop()
        if not isinstance(x, Node) or id(x) in region or x.kind in ("input", "param"):
            continue
        if x.kind != "pw" and _of_params(x, of_params):
            computed[id(x)] = x
            continue
        if x.kind == "gemm":
            if mm1 is not None and x is not mm1:
                return None
            mm1 = x
            continue
        if x.kind not in ("pw", "reduce"):
            return None
        region[id(x)] = x
        stack += [a for a in _flat(x.args) if isinstance(a, Node)]
    if mm1 is None or mm1.op != "bmm" or mm1.args[2] is not None or len(mm1.shape) != 3:
        return None
    n, L, S = mm1.shape
    if tuple(mm2.shape[:2]) != (n, L) or mm2.args[0].shape != mm1.shape or tuple(v.shape[:2]) != (n, S):
        return None
    E, Ev = mm1.args[0].shape[-1], v.shape[-1]
    if E % 8 or Ev % 8 or E > MAX_HEAD or Ev > MAX_HEAD or {mm1.dtype, mm2.dtype} != {"float32"}:
        return None  # left to the matmuls (level 1 task 97's heads of 1024)
    # the scores' chain: the region's nodes computed from S; the rest reads leaves only (a mask from a buffer)
    from_s = {id(mm1)}
    def order(x):
        return pos[id(x)]
    for x in sorted(region.values(), key=order):
        if any(isinstance(a, Node) and id(a) in from_s for a in _flat(x.args)):
            from_s.add(id(x))
    chain = [x for x in region.values() if id(x) in from_s]
    side = [x for x in region.values() if id(x) not in from_s]
    if any(x.kind != "pw" for x in side):
        return None
    inside = set(region) | {id(mm2)} | {id(x) for x in views}
    for x in [mm1] + chain + views:  # nothing outside reads the scores
        if x is output or any(id(r) not in inside for r in readers.get(id(x), [])):
            return None
    for x in chain:  # elementwise on the scores: views and same-size ops only (no slice, permute, broadcast growth)
        if x.kind == "pw" and (x.op in REMAPS or math.prod(x.shape) != n * L * S):
            return None
        if x.kind == "reduce" and math.prod(x.shape) * S != n * L * S:
            return None
    reduces = [x for x in chain if x.kind == "reduce"]
    if not reduces:
        kind, score = "pointwise", p
    else:
        score = _softmax_input(p, S)
        if score is None:
            return None
        below = ancestors(score)  # the softmax's own two reductions only: none under its input
        if any(id(x) in below for x in reduces):
            return None
        kind = "softmax"
    mask = _tile_mask(kind, score, from_s)
    leaves = []
    for x in side + chain:
        for a in _flat(x.args):
            if isinstance(a, Node) and (a.kind in ("input", "param") or id(a) in computed) and all(a is not b for b in leaves):
                leaves.append(a)
    q, kt = mm1.args[0], mm1.args[1]
    sig = ";".join(f"{x.kind}:{x.op}:{x.shape}:{[a if not isinstance(a, Node) else a.kind for a in x.args]}"
                   for x in sorted(side + chain, key=order))  # the graph's structure() tells two chains apart by it
    # the chain reads a computed input as the node it was here; the kernel as its argument (a cut's input after it)
    at = [(i, x) for i, x in enumerate(leaves) if id(x) in computed]
    return Node(f"attention_{mm2.name}", "attention", kind, [q, kt, v] + leaves, tuple(mm2.shape), mm2.dtype,
                attrs={"scores": mm1, "score": score, "chain": sig, "mask": mask, **({"computed": at} if at else {})})


def _of_params(x: Node, memo: dict) -> bool:
    """Whether `x` is computed from parameters and constants alone (no input of the task above it); `memo` by id."""
    if id(x) not in memo:
        memo[id(x)] = x.kind != "input" and all(_of_params(a, memo) for a in _flat(x.args) if isinstance(a, Node))
    return memo[id(x)]


def _tile_mask(kind: str, score: Node, from_s: set[int]) -> Node | None:
    """The mask (a function of leaves alone) under which a score counts for nothing whatever its value: the
    softmax's input masked_fill(x, mask, -inf), or weights relu(masked_fill(x, mask, -inf)) or
    masked_fill(x, mask, 0). A key tile masked for all of a block's rows is then skipped (causal attention: the
    tiles above the diagonal, about half)."""
    x = score
    if kind == "pointwise" and x.kind == "pw" and x.op == "relu" and isinstance(x.args[0], Node):
        x, fill = x.args[0], float("-inf")
    else:
        fill = float("-inf") if kind == "softmax" else 0.0
    if x.kind == "pw" and x.op == "masked_fill" and len(x.args) == 3 and isinstance(x.args[1], Node) \
            and id(x.args[1]) not in from_s and isinstance(x.args[2], (int, float)) and float(x.args[2]) == fill:
        # read at the score's index as the masked_fill reads it (broadcast from its own shape)
        return Node(f"{x.name}_mask", "pw", "mul", [x.args[1], 1.0], tuple(x.shape), "float32")
    return None


def _softmax_input(p: Node, S: int) -> Node | None:
    """X where p = exp(X - amax(X)) / sum(exp(X - amax(X))) over the last dim (as `_softmax` lowers it)."""
    if not (p.kind == "pw" and p.op == "div" and len(p.args) == 2 and all(isinstance(a, Node) for a in p.args)):
        return None
    e2, tot = p.args
    if not (tot.kind == "reduce" and tot.op == "sum" and tot.keepdim and tot.dims == (len(tot.shape) - 1,)):
        return None
    e1 = tot.args[0]
    xs = []
    for e in (e1, e2):
        if not (isinstance(e, Node) and e.kind == "pw" and e.op == "exp"):
            return None
        sh = e.args[0]
        if not (isinstance(sh, Node) and sh.kind == "pw" and sh.op == "sub" and isinstance(sh.args[1], Node)):
            return None
        x, m = sh.args
        if not (m.kind == "reduce" and m.op == "amax" and m.args[0] is x and m.keepdim and m.dims == (len(m.shape) - 1,)):
            return None
        xs.append(x)
    if xs[0] is not xs[1] or xs[0].shape[-1] != S or tuple(e2.shape) != tuple(xs[0].shape):
        return None
    return xs[0]


# -- planning ------------------------------------------------------------------------------------------
@dataclass
class AttnPlan:
    node: Node
    n: int  # batch x heads
    L: int  # query rows
    S: int  # keys
    E: int  # Q and K's head dim
    Ev: int  # V's
    q: Node  # the leaves read in place
    k: Node
    k_rows: bool  # K stored (n, S, E) (k-contiguous); else (n, E, S)
    v: Node


def plan_attention(g: OpGraph) -> AttnPlan:
    at = [x for x in g.nodes if x.kind == "attention"]
    if len(at) != 1 or any(x.kind in ("gemm", "conv", "reduce", "pool", "scan", "rnn") for x in g.nodes):
        raise Unsupported("attention beside other heavy ops in one kernel")
    a = at[0]
    if unview(g.output) is not a:
        raise Unsupported("ops after attention in its kernel")
    q, kt, v = a.args[:3]
    (sq, tq), (sk, tk), (sv, tv) = _batched_source(q), _batched_source(kt), _batched_source(v)
    if tq or tv:
        raise Unsupported("a transposed Q or V")
    if {sq.dtype, sk.dtype, sv.dtype, a.dtype} != {"float32"}:
        raise Unsupported("attention on other than fp32")
    n, L, E = q.shape
    S, Ev = v.shape[1], v.shape[2]
    if E % 8 or Ev % 8 or E > MAX_HEAD or Ev > MAX_HEAD:
        raise Unsupported(f"attention with head dims {E}, {Ev} (multiples of 8 up to {MAX_HEAD})")
    return AttnPlan(a, n, L, S, E, Ev, sq, sk, tk, sv)


def arg_order(g: OpGraph, p: AttnPlan) -> list[Node]:
    fixed = [p.q, p.k, p.v]
    return fixed + [t for t in g.inputs + g.params if all(t is not f for f in fixed)]


def shared_bytes(p: AttnPlan, ring: bool = True) -> int:
    k = (BN * (p.E + 4)) if p.k_rows else p.E * (BN + 8)
    return 4 * (BM * (p.E + 4) + (2 if ring else 1) * (k + BN * (p.Ev + 4)))


def grid(p: AttnPlan) -> tuple[int, int]:
    return (-(-p.L // BM), p.n)


# -- the kernel ----------------------------------------------------------------------------------------
def render(g: OpGraph, p: AttnPlan, ring: bool = True) -> str:
    a = p.node
    mm1, score = a.attrs["scores"], a.attrs["score"]
    rest = [t for t in g.inputs + g.params if all(t is not f for f in (p.q, p.k, p.v))]
    alias = {id(x): a.args[3 + i] for i, x in a.attrs.get("computed", [])}
    em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", lambda x: "s_val" if x is mm1 else None, prefix="f", alias=alias)
    val = em.value(score, "i")
    mask = a.attrs.get("mask")
    if mask is not None:
        mem = Emitter(lambda t, i: f"to_f({t.name}[{i}])", prefix="m", alias=alias)
        mval = mem.value(mask, "i")
    side = "".join(f", const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in rest)
    side_args = "".join(f", {t.name}" for t in rest)
    L, S, E, Ev = p.L, p.S, p.E, p.Ev
    QP, KP = E + 4, (E + 4 if p.k_rows else BN + 8)
    VP = Ev + 4
    soft = a.op == "softmax"
    NV = Ev // 8
    # K's element (key j, dim e) in shared memory: (BN, E) rows or (E, BN) columns as K is stored
    ks = (lambda j, e: f"s_kt[({j}) * {KP} + ({e})]") if p.k_rows else (lambda j, e: f"s_kt[({e}) * {KP} + ({j})]")
    k_floats = BN * KP if p.k_rows else E * KP
    # tiles by cp.async, 16 bytes a copy (rows of E or Ev, K's columns where S is a multiple of 4), zero-filled past
    # the end (the source address then clamped to a valid one: nothing is read)
    rows16 = lambda dst, src, n, pitch, width, limit, start: f"""        for (int x = threadIdx.x; x < {n * width // 4}; x += {THREADS}) {{
            const int r = x / {width // 4}, c = (x % {width // 4}) * 4;
            const bool in = {start} + r < {limit};
            cp_async<16>({dst} + r * {pitch} + c, {src} + (long long)(in ? {start} + r : 0) * {width} + c, in ? 16 : 0);
        }}"""  # noqa: E731
    if p.k_rows:
        kload = rows16("s_kd", "Kb", BN, KP, E, S, "j0")
    elif S % 4 == 0:
        kload = f"""        for (int x = threadIdx.x; x < {E * BN // 4}; x += {THREADS}) {{
            const int e = x / {BN // 4}, j = (x % {BN // 4}) * 4;
            const bool in = j0 + j < {S};
            cp_async<16>(s_kd + e * {KP} + j, Kb + (long long)e * {S} + (in ? j0 + j : 0), in ? 16 : 0);
        }}"""
    else:
        kload = f"""        for (int x = threadIdx.x; x < {E * BN}; x += {THREADS}) {{
            const int e = x / {BN}, j = x % {BN};
            const bool in = j0 + j < {S};
            cp_async<4>(s_kd + e * {KP} + j, Kb + (long long)e * {S} + (in ? j0 + j : 0), in ? 4 : 0);
        }}"""
    vload = rows16("s_vd", "Vb", BN, VP, Ev, S, "j0")
    qload = rows16("s_q", "Qb", BM, QP, E, L, "r0")
    if soft:
        online = f"""        // online softmax: each thread holds rows g and g + 8 of its warp's 16 (4 lanes a row)
        float s_new[2];
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
            float mx = s_m[h];
            #pragma unroll
            for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s_acc[nt][2 * h], s_acc[nt][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            s_new[h] = mx;
        }}
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
            const float base = s_new[h] == -INFINITY ? 0.0f : s_new[h];  // a row masked so far: no NaN from -inf - -inf
            const float alpha = expf(s_m[h] - base);
            s_m[h] = s_new[h];
            s_l[h] *= alpha;
            #pragma unroll
            for (int vt = 0; vt < {NV}; ++vt) {{ s_o[vt][2 * h] *= alpha; s_o[vt][2 * h + 1] *= alpha; }}
            #pragma unroll
            for (int nt = 0; nt < 8; ++nt) {{
                s_acc[nt][2 * h] = expf(s_acc[nt][2 * h] - base);
                s_acc[nt][2 * h + 1] = expf(s_acc[nt][2 * h + 1] - base);
                s_l[h] += s_acc[nt][2 * h] + s_acc[nt][2 * h + 1];
            }}
        }}"""
        fin = """    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        s_l[h] += __shfl_xor_sync(0xffffffffu, s_l[h], 1);
        s_l[h] += __shfl_xor_sync(0xffffffffu, s_l[h], 2);
        s_l[h] = 1.0f / s_l[h];
    }"""
        outside = "-INFINITY"
        scale = " * s_l[h]"
    else:
        online, fin, outside, scale = "", "", "0.0f", ""
    # the chain's index arithmetic in 32 bits where every tensor it indexes is small enough: a 64-bit divide by a
    # constant is a dozen instructions, and the chain runs on each score (a causal mask's index: three of them)
    small = max([p.n * L * S] + [math.prod(t.shape) for t in rest]) < 2 ** 29
    ix = "int" if small else "long long"

    def narrow(code: str) -> str:
        return re.sub(r"\b(\d+)LL\b", r"\1", code.replace("long long", "int")) if small else code
    at = f"({ix})(b * {L} + row) * {S} + key{side_args}" if small else f"((long long)b * {L} + row) * {S}LL + key{side_args}"
    mask_fn = ""
    if mask is not None:
        mask_fn = f"""__device__ __forceinline__ bool egg_masked({ix} i{side}) {{
{narrow(mem.take("    "))}
    return ({narrow(mval)}) != 0.0f;
}}
"""
        mask_fn += f"""__device__ __forceinline__ int egg_next_tile(int j0, int b, int r0{side}) {{
    // the first key tile from j0 with a score of the block's rows not masked (the others count for nothing)
    for (; j0 < {S}; j0 += {BN}) {{
        int live = 0;
        for (int x = threadIdx.x; x < {BM * BN} && !live; x += {THREADS}) {{
            const int row = r0 + x / {BN}, key = j0 + x % {BN};
            live = row < {L} && key < {S} && !egg_masked({at});
        }}
        if (__syncthreads_or(live)) return j0;
    }}
    return j0;
}}
"""
    nxt = (lambda j: f"egg_next_tile({j}, b, r0{side_args})") if mask is not None else (lambda j: j)  # noqa: E731
    if ring:  # the next live tile's copies in flight under this one's MMAs
        loop = f"""    int j0 = {nxt("0")};
    if (j0 < {S}) {{
        float* s_kd = s_k;
        float* s_vd = s_v;
{kload}
{vload}
    }}
    cp_async_commit();
    for (int it = 0; j0 < {S}; ++it) {{
        const int jn = {nxt(f"j0 + {BN}")};
        __syncthreads();  // the buffer the next tile goes to was the last tile's: its readers are done
        if (jn < {S}) {{
            const int j0 = jn;
            float* s_kd = s_k + ((it + 1) & 1) * {k_floats};
            float* s_vd = s_v + ((it + 1) & 1) * {BN * VP};
{kload}
{vload}
        }}
        cp_async_commit();
        cp_async_wait<1>();  // this tile's copies (and Q's) landed; the next tile's may still fly
        __syncthreads();
        const float* s_kt = s_k + (it & 1) * {k_floats};
        const float* s_vt = s_v + (it & 1) * {BN * VP};"""
        loop_end = "        j0 = jn;\n    }"
    else:
        loop = f"""    for (int j0 = {nxt("0")}; j0 < {S}; j0 = {nxt(f"j0 + {BN}")}) {{
        __syncthreads();  // the last tile's readers are done
        float* s_kd = s_k;
        float* s_vd = s_v;
{kload}
{vload}
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        const float* s_kt = s_k;
        const float* s_vt = s_v;"""
        loop_end = "    }"
    src = f"""{PRELUDE}{TF32_PRELUDE}
__device__ __forceinline__ float egg_score(float s_val, {ix} i{side}) {{
{narrow(em.take("    "))}
    return {narrow(val)};
}}
{mask_fn}
extern "C" __global__ void __launch_bounds__({THREADS}) egg_attention(float* __restrict__ out, const float* __restrict__ Q,
        const float* __restrict__ K, const float* __restrict__ V{side}) {{
    extern __shared__ __align__(16) float s_mem[];
    float* s_q = s_mem;
    float* s_k = s_q + {BM * QP};
    float* s_v = s_k + {(2 if ring else 1) * k_floats};
    const int b = blockIdx.y, r0 = blockIdx.x * {BM};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float* Qb = Q + (long long)b * {L * E};
    const float* Kb = K + (long long)b * {S * E};
    const float* Vb = V + (long long)b * {S * Ev};
{qload}
    float s_o[{NV}][4];
    #pragma unroll
    for (int vt = 0; vt < {NV}; ++vt) s_o[vt][0] = s_o[vt][1] = s_o[vt][2] = s_o[vt][3] = 0.0f;
    float s_m[2] = {{-INFINITY, -INFINITY}}, s_l[2] = {{0.0f, 0.0f}};
    const float* qw = s_q + (warp * 16) * {QP};
{loop}
        float s_acc[8][4];
        #pragma unroll
        for (int nt = 0; nt < 8; ++nt) s_acc[nt][0] = s_acc[nt][1] = s_acc[nt][2] = s_acc[nt][3] = 0.0f;
        #pragma unroll
        for (int k0 = 0; k0 < {E}; k0 += 8) {{  // S = Q K^T, 3xTF32
            unsigned ah[4], al[4];
            split_tf32(qw[g * {QP} + k0 + t], ah[0], al[0]);
            split_tf32(qw[(g + 8) * {QP} + k0 + t], ah[1], al[1]);
            split_tf32(qw[g * {QP} + k0 + t + 4], ah[2], al[2]);
            split_tf32(qw[(g + 8) * {QP} + k0 + t + 4], ah[3], al[3]);
            #pragma unroll
            for (int nt = 0; nt < 8; ++nt) {{
                unsigned bh[2], bl[2];
                split_tf32({ks("nt * 8 + g", "k0 + t")}, bh[0], bl[0]);
                split_tf32({ks("nt * 8 + g", "k0 + t + 4")}, bh[1], bl[1]);
                mma_tf32(s_acc[nt], al, bh);
                mma_tf32(s_acc[nt], ah, bl);
                mma_tf32(s_acc[nt], ah, bh);
            }}
        }}
        #pragma unroll
        for (int nt = 0; nt < 8; ++nt) {{  // the chain on each score at its index; keys past the end count for nothing
            #pragma unroll
            for (int c = 0; c < 4; ++c) {{
                const int row = r0 + warp * 16 + g + (c >> 1) * 8, key = j0 + nt * 8 + 2 * t + (c & 1);
                s_acc[nt][c] = key < {S} && row < {L}
                    ? egg_score(s_acc[nt][c], {at}) : {outside};
            }}
        }}
{online}
        float s_t[{NV}][4];  // this tile's P V, added to the output in fp32 after
        #pragma unroll
        for (int vt = 0; vt < {NV}; ++vt) s_t[vt][0] = s_t[vt][1] = s_t[vt][2] = s_t[vt][3] = 0.0f;
        #pragma unroll
        for (int nt = 0; nt < 8; ++nt) {{  // k index t <-> key 2t, t + 4 <-> key 2t + 1 (the accumulator's own order)
            unsigned ph[4], pl[4];
            split_tf32(s_acc[nt][0], ph[0], pl[0]);
            split_tf32(s_acc[nt][2], ph[1], pl[1]);
            split_tf32(s_acc[nt][1], ph[2], pl[2]);
            split_tf32(s_acc[nt][3], ph[3], pl[3]);
            const float* v0 = s_vt + (nt * 8 + 2 * t) * {VP} + g;
            #pragma unroll
            for (int vt = 0; vt < {NV}; ++vt) {{
                unsigned bh[2], bl[2];
                split_tf32(v0[vt * 8], bh[0], bl[0]);
                split_tf32(v0[{VP} + vt * 8], bh[1], bl[1]);
                mma_tf32(s_t[vt], pl, bh);
                mma_tf32(s_t[vt], ph, bl);
                mma_tf32(s_t[vt], ph, bh);
            }}
        }}
        #pragma unroll
        for (int vt = 0; vt < {NV}; ++vt) {{
            s_o[vt][0] += s_t[vt][0]; s_o[vt][1] += s_t[vt][1]; s_o[vt][2] += s_t[vt][2]; s_o[vt][3] += s_t[vt][3];
        }}
{loop_end}
{fin}
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
        const int row = r0 + warp * 16 + g + h * 8;
        if (row < {L}) {{
            float* o = out + ((long long)b * {L} + row) * {Ev};
            #pragma unroll
            for (int vt = 0; vt < {NV}; ++vt) {{
                o[vt * 8 + 2 * t] = s_o[vt][2 * h]{scale};
                o[vt * 8 + 2 * t + 1] = s_o[vt][2 * h + 1]{scale};
            }}
        }}
    }}
}}
"""
    # its helpers named by its own source: a program's two attention kernels (Swin V2's blocks with and without the
    # shift mask) are compiled in one unit, where one name defined twice does not compile
    tag = hashlib.sha1(src.encode()).hexdigest()[:10]
    return re.sub(r"\b(egg_score|egg_masked|egg_next_tile)\(", lambda m: f"{m.group(1)}_{tag}(", src)
