"""GEMM with a fused pointwise epilogue: C = A @ B (linear: B = W^T, plus bias), batched or not.

fp32: SIMT tiles (BM x BN per block, TM x TN per thread, BK deep), A staged transposed in
shared memory so the inner loop reads conflict-free rows.
bf16/fp16: tensor cores through `mma.sync.m16n8k16` (fp32 accumulate); warps tile the block
(WM x WN), 16-byte global loads, padded shared tiles, optional cp.async double buffering."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import check_elementwise_after, Node, OpGraph, Unsupported, unview


@dataclass
class GemmPlan:
    gemm: Node
    batch: int
    M: int
    N: int
    K: int
    b_layout: str  # "nk" (linear weight, k contiguous) or "kn" (row-major B)
    a_batched: bool
    b_batched: bool
    bias: Node | None
    dtype: str
    a_layout: str = "mk"  # "km": A is stored transposed (A.T in the reference), fp32 SIMT path only
    a_src: Node | None = None  # the tensors the kernel reads (a transposed operand's own input)
    b_src: Node | None = None

    def __post_init__(self):
        self.a_src = self.a_src or self.gemm.args[0]
        self.b_src = self.b_src or self.gemm.args[1]


@dataclass
class GemmKnobs:
    BM: int = 64
    BN: int = 64
    BK: int = 16
    TM: int = 4  # fp32 only
    TN: int = 4
    WM: int = 2  # tensor-core: warps along M and N
    WN: int = 2
    stages: int = 1  # tensor-core path: 1 synchronous loads; S >= 2 a ring of S cp.async tiles
    pad: int = 4  # shared-memory row padding in elements (bank conflicts)
    ldm: bool = False  # tensor-core path: fragments through ldmatrix (.trans for row-major B)
    wgmma: bool = False  # TF32 on Hopper's warpgroup MMA: a warpgroup (128 threads) per 64 rows of the tile
    splitk: int = 1  # 3xTF32 mma.sync: K cut into this many ranges, one block each, partials summed after
    ostage: bool = False  # 3xTF32 mma.sync: the output tile through shared memory, stored 16 bytes a thread
    planes: bool = False  # 3xTF32 wgmma (with wgmma): both operands split once into TF32 high/low planes in memory
    fold: int = 4  # planes: k-tiles summed in their own accumulator before it is added to the total
    direct: bool = False  # 16-bit warpgroup MMA: both operands' tiles copied straight from the tensors (no staging pass)
    lead: bool = False  # warpgroup-MMA rings: tiles S - 1 ahead (a second barrier a step) instead of S - 2
    tma: bool = False  # warpgroup MMA (16-bit GEMM, planes, conv): tiles by TMA from a producer warpgroup, mbarriers
    persist: bool = False  # tma (16-bit GEMM, conv): a block an SM walks the tiles, the next tile's loads under this one's epilogue
    bchunks: bool = False  # tma 16-bit GEMM, B (K, N) read MN-major, N a multiple of 64: its 64-column blocks a dim of the
    # map, a k-tile of B one 4-d box (one copy, not BN / 64)
    mcast: bool = False  # tma 16-bit GEMM: blocks in clusters of two (row tiles side by side) share B's k-tile, each copying
    # half of it into both rings by TMA multicast (a third less L2 traffic a block)
    pingpong: bool = False  # tma conv, persistent, BM 128: its two consumer warpgroups take 64-row tiles in turn, one's
    # epilogue under the other's MMAs
    bsplit: bool = False  # planes: B read raw into the ring and split in shared memory (only A's planes in memory)
    swz: bool = False  # wgmma (planes GEMM, conv): tiles in the 128-byte swizzle (K 32: a row of a tile is 128 bytes), so the
    # tensor cores' reads of 8-row groups 1 KB apart spread over the banks
    whole: bool = False  # conv on mma.sync, short K: the whole K in shared memory, a persistent block over pixel tiles (conv_short)
    stream: bool = False  # fp32, a few rows by weights (N, K): warps walk TN weight rows each, A in shared memory (gemm_stream)
    cl_out: str = ""  # conv: the output written channels last ("raw", or "tf32": rounded to TF32) as the next conv's
    # staged input, that conv's staging pass skipped (a program's conv -> conv hand-off)
    cat_out: int = 0  # conv: the output stored into a channel slice of a concatenation of this many channels (its
    # pointer at the slice's first element; a program's conv -> cat, the concatenating pass dropped)
    order: str = "tile"  # 3xTF32 mma.sync: "term" issues each of the three products over the whole warp tile
    # in turn (consecutive MMAs write different accumulators; each accumulator's sum is the same)

    @classmethod
    def of(cls, params: dict) -> GemmKnobs:
        """The knobs a design's parameters set (its other keys, family, layout, split..., are not knobs)."""
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})

    def threads(self, tc: bool) -> int:
        if tc and self.wgmma:
            return 2 * self.BM + (128 if self.tma else 0)
        return self.WM * self.WN * 32 if tc else (self.BM // self.TM) * (self.BN // self.TN)


def plan_gemm(g: OpGraph) -> GemmPlan:
    gs = [n for n in g.nodes if n.kind == "gemm"]
    if len(gs) != 1:
        raise Unsupported(f"{len(gs)} matmuls in one task")
    gm = gs[0]
    if any(n.kind == "reduce" for n in g.nodes):
        raise Unsupported("a reduction after a matmul")
    check_elementwise_after(g, [gm], "matmul")
    return plan_of(gm)


def plan_of(gm: Node) -> GemmPlan:
    """The GEMM a matmul node is (shapes, layouts, which tensors the kernel reads), whatever follows it."""
    a, b, bias = gm.args
    if gm.op == "bmm" and any(n.kind == "pw" and n.op in ("view", "transpose2d") for n in (a, b)):
        return _plan_batched_views(gm, a, b)
    if a.kind == "pw" and a.op == "transpose2d" and b.kind == "pw" and b.op == "transpose2d" or \
            gm.op != "linear" and (a.op == "transpose2d" or b.op == "transpose2d"):
        return _plan_transposed(gm, a, b)
    a_src = a
    # a reshape of a contiguous input that keeps its rows (K, the last dim): the same (M, K) rows in memory,
    # whatever its leading dims (NetVLAD's x.view(-1, D) @ clusters)
    while a_src.kind == "pw" and a_src.op == "view" and (
            gm.op == "linear" or len(a.shape) == 2 and a_src.args[0].shape[-1:] == a.shape[-1:]):
        a_src = a_src.args[0]
    if a_src.kind not in ("input", "param") or b.kind not in ("input", "param"):
        raise Unsupported("a matmul whose operands are computed (a prologue)")
    if a.dtype != b.dtype or a.dtype not in ("float32", "bfloat16", "float16"):
        raise Unsupported(f"matmul of {a.dtype} x {b.dtype}")
    if gm.op == "linear":
        if len(b.shape) != 2:
            raise Unsupported("linear with a non-2-d weight")
        N, K = b.shape
        lead = a.shape[:-1]
        M = 1
        for s in lead:
            M *= s
        return GemmPlan(gm, 1, M, N, K, "nk", False, False, bias, a.dtype, a_src=a_src)
    if len(a.shape) == 2 and len(b.shape) == 2:
        (M, K), (K2, N) = a.shape, b.shape
        if K != K2:
            raise Unsupported(f"matmul of shapes {a.shape} x {b.shape}")
        return GemmPlan(gm, 1, M, N, K, "kn", False, False, None, a.dtype, a_src=a_src)
    if len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] == b.shape[0]:
        return GemmPlan(gm, a.shape[0], a.shape[1], b.shape[2], a.shape[2], "kn", True, True, None, a.dtype)
    if len(a.shape) >= 3 and len(b.shape) == 2:  # (B, ..., M, K) @ (K, N): one big M
        return GemmPlan(gm, 1, math.prod(a.shape[:-1]), b.shape[1], a.shape[-1], "kn", False, False, None, a.dtype)
    raise Unsupported(f"matmul of shapes {a.shape} x {b.shape}")


def _batched_source(n: Node) -> tuple[Node, bool]:
    """A bmm operand read in place: (the tensor, stored transposed), seeing through a transpose of
    its last two dims and a view of an input or parameter (contiguous: any reshape of it is the same memory,
    attention's (B, H, L, E) as (B*H, L, E), an einsum's permuted operand as (batch, K, N))."""
    tr = n.kind == "pw" and n.op == "transpose2d"
    if tr:
        n = n.args[0]
    if n.kind == "pw" and n.op == "view":
        src = unview(n.args[0])  # a view of a view is a view of the base
        if src.kind in ("input", "param") and len(n.shape) == 3:
            n = src
        elif (not tr and src.kind == "pw" and src.op == "permute" and len(n.shape) == 3
              and list(src.args[1]) == list(range(len(src.shape) - 2)) + [len(src.shape) - 1, len(src.shape) - 2]
              and src.args[0].kind in ("input", "param") and tuple(src.shape[-2:]) == tuple(n.shape[-2:])):
            n, tr = src.args[0], True  # x.transpose(-2, -1) of an N-d input, batch dims merged: read transposed
    if n.kind not in ("input", "param"):
        raise Unsupported("a matmul whose operands are computed (a prologue)")
    return n, tr


def _plan_batched_views(gm: Node, a: Node, b: Node) -> GemmPlan:
    """A bmm over merged batch dims (attention's (B, H, L, E) as (B*H, L, E)), B possibly K^T."""
    if len(a.shape) == 3 and len(b.shape) == 2 and b.kind == "pw" and b.op == "transpose2d":
        sa, ta = _batched_source(a)  # (B, M, K) @ W.T, W (N, K) read in place: one GEMM of B * M rows
        sb = b.args[0]
        if ta or sb.kind not in ("input", "param") or sa.dtype != sb.dtype or sa.dtype not in ("float32", "bfloat16", "float16"):
            raise Unsupported(f"matmul of shapes {a.shape} x {b.shape} (a transposed or computed operand)")
        return GemmPlan(gm, 1, a.shape[0] * a.shape[1], b.shape[1], a.shape[2], "nk", False, False, None, sa.dtype,
                        a_src=sa, b_src=sb)
    if len(a.shape) != 3 or len(b.shape) != 3:
        raise Unsupported(f"matmul of shapes {a.shape} x {b.shape}")
    (sa, ta), (sb, tb) = _batched_source(a), _batched_source(b)
    if ta:
        raise Unsupported("a transposed A operand of a batched matmul")
    if sa.dtype != sb.dtype or sa.dtype not in ("float32", "bfloat16", "float16"):
        raise Unsupported(f"matmul of {sa.dtype} x {sb.dtype}")
    (nb, M, K), (nb2, K2, N) = a.shape, b.shape
    if nb != nb2 or K != K2:
        raise Unsupported(f"matmul of shapes {a.shape} x {b.shape}")
    return GemmPlan(gm, nb, M, N, K, "nk" if tb else "kn", True, True, None, sa.dtype, a_src=sa, b_src=sb)


def _plan_transposed(gm: Node, a: Node, b: Node) -> GemmPlan:
    """A 2-d matmul whose operands are stored transposed (`A.T @ B`, `A @ B.T`): read in place."""
    def under(n):
        return (n.args[0], True) if n.kind == "pw" and n.op == "transpose2d" else (n, False)
    (sa, ta), (sb, tb) = under(a), under(b)
    if sa.kind not in ("input", "param") or sb.kind not in ("input", "param") or len(a.shape) != 2 or len(b.shape) != 2:
        raise Unsupported("a matmul whose operands are computed (a prologue)")
    if sa.dtype != sb.dtype or sa.dtype not in ("float32", "bfloat16", "float16"):
        raise Unsupported(f"matmul of {sa.dtype} x {sb.dtype}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise Unsupported(f"matmul of shapes {a.shape} x {b.shape}")
    if ta and sa.dtype != "float32":
        raise Unsupported("a transposed A operand on tensor cores (bf16/fp16)")
    return GemmPlan(gm, 1, M, N, K, "nk" if tb else "kn", False, False, None, sa.dtype,
                    a_layout="km" if ta else "mk", a_src=sa, b_src=sb)


def epilogue(g: OpGraph, p: GemmPlan, acc: str, idx: str, indent: str) -> tuple[str, str]:
    bias = p.gemm.args[2]

    def special(n):
        if n is p.gemm:
            if bias is None:
                return acc
            # a computed bias (Swin V2's cat(q_bias, zeros, v_bias)) is evaluated at the column like any value
            b = f"to_f({bias.name}[n])" if bias.kind in ("input", "param") else em.value(bias, "n")
            return f"({acc} + {b})"
        return None
    em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", special, prefix="e")
    v = em.value(g.output, idx)
    return em.take(indent), v


def kernel_args(g: OpGraph, p: GemmPlan) -> str:
    out = g.output
    a, b = p.a_src, p.b_src
    rest = [t for t in g.inputs + g.params if t is not a and t is not b]
    return ", ".join([f"{CTYPE[out.dtype]}* __restrict__ out", f"const {CTYPE[a.dtype]}* __restrict__ A",
                      f"const {CTYPE[b.dtype]}* __restrict__ B"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in rest])


def arg_order(g: OpGraph, p: GemmPlan) -> list[Node]:
    a, b = p.a_src, p.b_src
    return [a, b] + [t for t in g.inputs + g.params if t is not a and t is not b]


# a K at least this long is summed in two levels (chunks of about sqrt(K) into the total): a plain
# running fp32 sum over K terms drifts like K*eps, far from eager's error (KernelBench 4 and 6)
CHUNKED_K = 8192


def k_chunk_tiles(K: int, BK: int) -> int:
    return max(1, round(K ** 0.5 / BK)) if K >= CHUNKED_K else 0


def render_simt(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    M, N, K = p.M, p.N, p.K
    T = k.threads(False)
    ch = k_chunk_tiles(K, k.BK)
    if p.a_layout == "km":  # A stored (K, M): consecutive threads take consecutive m, so the loads coalesce
        a_tile = f"""        for (int e = tid; e < BM * BK; e += {T}) {{
            int r = e % BM, c = e / BM;  // A tile row r, k c; A stored transposed in memory
            As[c][r] = (m0 + r < {M} && k0 + c < {K}) ? to_f(Ab[(long long)(k0 + c) * {M}LL + (m0 + r)]) : 0.0f;
        }}"""
    else:
        a_tile = f"""        for (int e = tid; e < BM * BK; e += {T}) {{
            int r = e / BK, c = e % BK;  // A tile row r, k c; stored transposed
            As[c][r] = (m0 + r < {M} && k0 + c < {K}) ? to_f(Ab[(long long)(m0 + r) * {K}LL + (k0 + c)]) : 0.0f;
        }}"""
    tgt = "part" if ch else "acc"
    part_decl = ("\n    float part[TM][TN];\n#pragma unroll\n    for (int i = 0; i < TM; ++i)\n#pragma unroll\n"
                 "        for (int j = 0; j < TN; ++j) part[i][j] = 0.0f;") if ch else ""
    part_flush = (f"""
        if ((k0 / BK + 1) % {ch} == 0 || k0 + BK >= {K}) {{  // chunk done: into the total
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {{ acc[i][j] += part[i][j]; part[i][j] = 0.0f; }}
        }}""") if ch else ""
    bload = (f"B[(long long)(n0 + c) * {K}LL + (k0 + r)]" if p.b_layout == "nk" else
             f"Bb[(long long)(k0 + r) * {N}LL + (n0 + c)]")
    epi, v = epilogue(g, p, "acc[i][j]", f"(((long long)bz * {M}LL + m) * {N}LL + n)", "                ")
    return f"""{PRELUDE}
#define BM {k.BM}
#define BN {k.BN}
#define BK {k.BK}
#define TM {k.TM}
#define TN {k.TN}
extern "C" __global__ void __launch_bounds__({T}) egg_gemm({kernel_args(g, p)}) {{
    __shared__ float As[BK][BM + {k.pad}];
    __shared__ float Bs[BK][BN + {k.pad}];
    const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, bz = blockIdx.z;
    const auto* Ab = A + {"(long long)bz * " + str(M * K) + "LL" if p.a_batched else "0"};
    const auto* Bb = B + {"(long long)bz * " + str(K * N) + "LL" if p.b_batched else "0"};
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;{part_decl}
    for (int k0 = 0; k0 < {K}; k0 += BK) {{
{a_tile}
        for (int e = tid; e < BK * BN; e += {T}) {{
            int r = e / BN, c = e % BN;  // B tile k r, column c
            Bs[r][c] = (n0 + c < {N} && k0 + r < {K}) ? to_f({bload}) : 0.0f;
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {{
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {tgt}[i][j] = fmaf(a[i], b[j], {tgt}[i][j]);
        }}
        __syncthreads();{part_flush}
    }}
#pragma unroll
    for (int i = 0; i < TM; ++i) {{
#pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const long long m = m0 + ty * TM + i, n = n0 + tx * TN + j;
            if (m < {M} && n < {N}) {{
{epi}
                out[((long long)bz * {M}LL + m) * {N}LL + n] = from_f<{CTYPE[g.output.dtype]}>({v});
            }}
        }}
    }}
}}
"""


@dataclass(frozen=True)
class TcLayout:
    """The shared-memory layout of the tensor-core kernel: one place for the kernel and its launch."""
    BK: int
    lda: int  # A tile row pitch (elements)
    ldb: int  # B tile row pitch
    a_elems: int  # one stage's A tile
    b_elems: int
    stages: int
    elem_bytes: int = 2

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.a_elems + self.b_elems) * self.elem_bytes


def tc_layout(p: GemmPlan, k: GemmKnobs) -> TcLayout:
    BK = 32
    lda = BK + k.pad
    ldb = (BK + k.pad) if p.b_layout == "nk" else (k.BN + k.pad)
    return TcLayout(BK, lda, ldb, k.BM * lda, k.BN * ldb if p.b_layout == "nk" else BK * ldb, k.stages)


@dataclass(frozen=True)
class _Tc:
    """What every emitter of the tensor-core kernel needs to know."""
    p: GemmPlan
    k: GemmKnobs
    lay: TcLayout
    T: int  # threads
    ct: str  # element C type
    ty: str  # mma type suffix
    TMW: int  # warp tile
    TNW: int
    MI: int  # m16 / n8 fragments per warp tile
    NI: int
    vec: bool  # 16-byte global loads are aligned


def _tc_config(p: GemmPlan, k: GemmKnobs) -> _Tc:
    if p.a_layout != "mk":
        raise Unsupported("a transposed A operand on tensor cores")
    TMW, TNW = k.BM // k.WM, k.BN // k.WN
    MI, NI = TMW // 16, TNW // 8
    if MI < 1 or NI < 1 or TMW % 16 or TNW % 8:
        raise Unsupported("tensor-core tile shape")
    vec = p.K % 8 == 0 and (p.b_layout == "nk" or p.N % 8 == 0)
    if k.stages >= 2 and not vec:
        raise Unsupported("cp.async needs K and N multiples of 8")
    return _Tc(p, k, tc_layout(p, k), k.threads(True), CTYPE[p.dtype], "bf16" if p.dtype == "bfloat16" else "f16",
               TMW, TNW, MI, NI, vec)


def _tc_tile_loader(c: _Tc, async_: bool) -> str:
    """Global -> shared copies of one k-step's A and B tiles: cp.async, 16-byte vectors, or scalars."""
    p, k, ct, BK, lda, ldb = c.p, c.k, c.ct, c.lay.BK, c.lay.lda, c.lay.ldb
    M, N, K = p.M, p.N, p.K
    if p.b_layout == "nk":
        b_chunks = f"{k.BN} * {BK // 8}"
        b_rc = f"int r = c / {BK // 8}, kc = (c % {BK // 8}) * 8; long long gr = n0 + r, gk = k0 + kc; bool ok = gr < {N} && gk < {K};"
        b_src = f"Bb + gr * {K}LL + gk"
        b_scalar = f"for (int q = 0; q < 8; ++q) Bs_s[r * {ldb} + kc + q] = (gr < {N} && gk + q < {K}) ? Bb[gr * {K}LL + gk + q] : from_f<{ct}>(0.0f);"
    else:
        b_chunks = f"{BK} * {k.BN // 8}"
        b_rc = f"int r = c / {k.BN // 8}, kc = (c % {k.BN // 8}) * 8; long long gr = k0 + r, gk = n0 + kc; bool ok = gr < {K} && gk < {N};"
        b_src = f"Bb + gr * {N}LL + gk"
        b_scalar = f"for (int q = 0; q < 8; ++q) Bs_s[r * {ldb} + kc + q] = (gr < {K} && gk + q < {N}) ? Bb[gr * {N}LL + gk + q] : from_f<{ct}>(0.0f);"
    b_dst = f"Bs_s + r * {ldb} + kc"
    a_rc = f"int r = c / {BK // 8}, kc = (c % {BK // 8}) * 8; long long gr = m0 + r, gk = k0 + kc; bool ok = gr < {M} && gk < {K};"
    a_scalar = f"for (int q = 0; q < 8; ++q) As_s[r * {lda} + kc + q] = (gr < {M} && gk + q < {K}) ? Ab[gr * {K}LL + gk + q] : from_f<{ct}>(0.0f);"

    def one(rc, chunks, src, dst, scalar):
        if async_:
            body = (f"unsigned sa = (unsigned)__cvta_generic_to_shared({dst}); const {ct}* src = ok ? {src} : Ab;\n"
                    f"                asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" :: \"r\"(sa), \"l\"(src), \"r\"(ok ? 16 : 0));")
        elif c.vec:
            body = (f"uint4 v = make_uint4(0, 0, 0, 0); if (ok) v = *reinterpret_cast<const uint4*>({src});\n"
                    f"                *reinterpret_cast<uint4*>({dst}) = v;")
        else:
            body = scalar
        return (f"            for (int c = tid; c < {chunks}; c += {c.T}) {{\n                {rc}\n                {body}\n            }}")
    return (one(a_rc, f"{k.BM} * {BK // 8}", f"Ab + gr * {K}LL + gk", f"As_s + r * {lda} + kc", a_scalar) + "\n" +
            one(b_rc, b_chunks, b_src, b_dst, b_scalar))


def _tc_fragments(c: _Tc) -> tuple[str, str, int]:
    """Shared -> register fragment loads for A and B (plain 32-bit loads or ldmatrix), and the B step."""
    p, k, lda, ldb, NI = c.p, c.k, c.lay.lda, c.lay.ldb, c.NI
    if not k.ldm:
        a_frag = (f"a[mi][0] = *reinterpret_cast<const unsigned*>(As_s + (rb + g) * {lda} + kk + 2 * t);\n"
                  f"                    a[mi][1] = *reinterpret_cast<const unsigned*>(As_s + (rb + g + 8) * {lda} + kk + 2 * t);\n"
                  f"                    a[mi][2] = *reinterpret_cast<const unsigned*>(As_s + (rb + g) * {lda} + kk + 2 * t + 8);\n"
                  f"                    a[mi][3] = *reinterpret_cast<const unsigned*>(As_s + (rb + g + 8) * {lda} + kk + 2 * t + 8);")
        if p.b_layout == "nk":
            b_frag = (f"b[ni][0] = *reinterpret_cast<const unsigned*>(Bs_s + (cb + g) * {ldb} + kk + 2 * t);\n"
                      f"                b[ni][1] = *reinterpret_cast<const unsigned*>(Bs_s + (cb + g) * {ldb} + kk + 2 * t + 8);")
        else:
            b_frag = (f"b[ni][0] = pack2(Bs_s[(kk + 2 * t) * {ldb} + cb + g], Bs_s[(kk + 2 * t + 1) * {ldb} + cb + g]);\n"
                      f"                b[ni][1] = pack2(Bs_s[(kk + 2 * t + 8) * {ldb} + cb + g], Bs_s[(kk + 2 * t + 9) * {ldb} + cb + g]);")
        return a_frag, b_frag, 1
    if k.pad % 8:
        raise Unsupported("ldmatrix needs 16-byte aligned shared rows")
    a_frag = (f"unsigned sa = (unsigned)__cvta_generic_to_shared(As_s + (rb + (lane & 15)) * {lda} + kk + (lane >> 4) * 8);\n"
              "                    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\" "
              ": \"=r\"(a[mi][0]), \"=r\"(a[mi][1]), \"=r\"(a[mi][2]), \"=r\"(a[mi][3]) : \"r\"(sa));")
    # B fragments two n8 tiles at a time (ldmatrix .x4) where NI is even
    pair = NI % 2 == 0
    if p.b_layout == "nk":
        b_addr = (f"Bs_s + (cb + (lane & 7){' + ((lane >> 4) << 3)' if pair else ''}) * {ldb} + kk + ((lane >> 3) & 1) * 8")
        trans = ""
    else:
        b_addr, trans = f"Bs_s + (kk + (lane & 15)) * {ldb} + cb{' + (lane >> 4) * 8' if pair else ''}", ".trans"
    regs = ["b[ni][0]", "b[ni][1]"] + (["b[ni + 1][0]", "b[ni + 1][1]"] if pair else [])
    slots = ",".join(f"%{i}" for i in range(len(regs)))
    outs = ", ".join(f'"=r"({r})' for r in regs)
    b_frag = (f"unsigned sb = (unsigned)__cvta_generic_to_shared({b_addr});\n"
              f"                    asm volatile(\"ldmatrix.sync.aligned.m8n8.x{len(regs)}{trans}.shared.b16 {{{slots}}}, [%{len(regs)}];\\n\" "
              f": {outs} : \"r\"(sb));")
    return a_frag, b_frag, 2 if pair else 1


def _tc_mma(c: _Tc) -> str:
    ty = c.ty
    return (f"asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\\n\""
            " : \"+f\"(acc[mi][ni][0]), \"+f\"(acc[mi][ni][1]), \"+f\"(acc[mi][ni][2]), \"+f\"(acc[mi][ni][3])"
            " : \"r\"(a[mi][0]), \"r\"(a[mi][1]), \"r\"(a[mi][2]), \"r\"(a[mi][3]), \"r\"(b[ni][0]), \"r\"(b[ni][1]));")


def _tc_compute(c: _Tc) -> str:
    """One k-tile's MMAs. Every fragment of a k-step is loaded before its MMAs: the asm statements are
    volatile, so their source order is their issue order, and MMAs behind each tile's own load would wait on it."""
    a_frag, b_frag, b_step = _tc_fragments(c)
    return f"""            #pragma unroll
            for (int kk = 0; kk < {c.lay.BK}; kk += 16) {{
                unsigned a[{c.MI}][4], b[{c.NI}][2];
                #pragma unroll
                for (int mi = 0; mi < {c.MI}; ++mi) {{
                    const int rb = wm * {c.TMW} + mi * 16;
                    {a_frag}
                }}
                #pragma unroll
                for (int ni = 0; ni < {c.NI}; ni += {b_step}) {{
                    const int cb = wn * {c.TNW} + ni * 8;
                    {b_frag}
                }}
                #pragma unroll
                for (int mi = 0; mi < {c.MI}; ++mi) {{
                    #pragma unroll
                    for (int ni = 0; ni < {c.NI}; ++ni) {{
                        {_tc_mma(c)}
                    }}
                }}
            }}"""


def _tc_mainloop(c: _Tc) -> str:
    compute, ct, BK, K = _tc_compute(c), c.ct, c.lay.BK, c.p.K
    a_elems, b_elems = c.lay.a_elems, c.lay.b_elems
    if c.k.stages < 2:
        return f"""    for (int k0 = 0; k0 < {K}; k0 += {BK}) {{
        {{
            {ct}* As_s = As; {ct}* Bs_s = Bs;
{_tc_tile_loader(c, False)}
        }}
        __syncthreads();
        {{
            const {ct}* As_s = As; const {ct}* Bs_s = Bs;
{compute}
        }}
        __syncthreads();
    }}"""
    S = c.k.stages
    # an S-slot ring of cp.async tiles: S - 1 tiles in flight while one is computed; one barrier a
    # step (it also frees the slot computed last step, which this step refills). Every step
    # commits a group, empty or not, so `wait_group S-2` always means "tile kt has landed".
    return f"""    const int KT = ({K} + {BK} - 1) / {BK};
    #pragma unroll
    for (int s = 0; s < {S - 1}; ++s) {{
        if (s < KT) {{
            const int k0 = s * {BK}; {ct}* As_s = As + s * {a_elems}; {ct}* Bs_s = Bs + s * {b_elems};
{_tc_tile_loader(c, True)}
        }}
        asm volatile("cp.async.commit_group;\\n" ::);
    }}
    for (int kt = 0; kt < KT; ++kt) {{
        asm volatile("cp.async.wait_group {S - 2};\\n" ::);
        __syncthreads();
        {{
            const int kn = kt + {S - 1};
            if (kn < KT) {{
                const int k0 = kn * {BK}; {ct}* As_s = As + (kn % {S}) * {a_elems}; {ct}* Bs_s = Bs + (kn % {S}) * {b_elems};
{_tc_tile_loader(c, True)}
            }}
            asm volatile("cp.async.commit_group;\\n" ::);
        }}
        {{
            const {ct}* As_s = As + (kt % {S}) * {a_elems}; const {ct}* Bs_s = Bs + (kt % {S}) * {b_elems};
{compute}
        }}
    }}
    asm volatile("cp.async.wait_group 0;\\n" ::);"""


def render_tc(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """The tensor-core kernel: loaders, fragment loads and MMAs (the main loop), then the fused epilogue."""
    c = _tc_config(p, k)
    M, N, K, ct, MI, NI = p.M, p.N, p.K, c.ct, c.MI, c.NI
    mainloop = _tc_mainloop(c)
    epi, v = epilogue(g, p, "acc[mi][ni][2 * h + e]", f"(((long long)bz * {M}LL + m) * {N}LL + n)", "                    ")
    bits = "__bfloat16_as_ushort" if p.dtype == "bfloat16" else "__half_as_ushort"
    return f"""{PRELUDE}
__device__ __forceinline__ unsigned pack2({ct} lo, {ct} hi) {{
    return (unsigned){bits}(lo) | ((unsigned){bits}(hi) << 16);
}}
extern "C" __global__ void __launch_bounds__({c.T}) egg_gemm({kernel_args(g, p)}) {{
    extern __shared__ __align__(16) unsigned char smem[];
    {ct}* As = reinterpret_cast<{ct}*>(smem);
    {ct}* Bs = As + {k.stages} * {c.lay.a_elems};
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / {k.WN}, wn = warp % {k.WN};
    const long long m0 = (long long)blockIdx.y * {k.BM}, n0 = (long long)blockIdx.x * {k.BN};
    const int bz = blockIdx.z;
    const {ct}* Ab = A + {"(long long)bz * " + str(M * K) + "LL" if p.a_batched else "0"};
    const {ct}* Bb = B + {"(long long)bz * " + str(K * N) + "LL" if p.b_batched else "0"};
    float acc[{MI}][{NI}][4];
    #pragma unroll
    for (int mi = 0; mi < {MI}; ++mi)
        #pragma unroll
        for (int ni = 0; ni < {NI}; ++ni)
            #pragma unroll
            for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
{mainloop}
    #pragma unroll
    for (int mi = 0; mi < {MI}; ++mi)
        #pragma unroll
        for (int ni = 0; ni < {NI}; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {{
                    const long long m = m0 + wm * {c.TMW} + mi * 16 + g + 8 * h;
                    const long long n = n0 + wn * {c.TNW} + ni * 8 + 2 * t + e;
                    if (m < {M} && n < {N}) {{
{epi}
                    out[((long long)bz * {M}LL + m) * {N}LL + n] = from_f<{CTYPE[g.output.dtype]}>({v});
                    }}
                }}
}}
"""


def shared_bytes_tc(p: GemmPlan, k: GemmKnobs) -> int:
    return tc_layout(p, k).shared_bytes


def grid(p: GemmPlan, k: GemmKnobs) -> tuple[int, int, int]:
    if -(-p.M // k.BM) > 65535 or p.batch > 65535:  # grid y and z stop at 65535
        raise Unsupported("more than 65535 row tiles or batches for this tile")
    return (-(-p.N // k.BN), -(-p.M // k.BM), p.batch)
