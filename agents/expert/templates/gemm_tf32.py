"""fp32 GEMM on tensor cores at fp32-grade accuracy: 3xTF32 through `mma.sync.m16n8k8.tf32`.

Each fp32 operand x is split into a TF32 high part h (x truncated to TF32) and a low part l = x - h;
a*b ~ ah*bh + ah*bl + al*bh (the al*bl term is below fp32's own rounding), all accumulated in
fp32, small terms first. Eager runs exact-fp32 cuBLAS on SIMT cores; this runs on the tensor
pipe, three MMAs per product. Any operand layout (A as (M,K) or (K,M), B as (K,N) or (N,K)):
each operand's shared tile keeps its global layout, padded so the fragment reads are
conflict-free; tiles arrive by cp.async (16-byte chunks where the contiguous pitch allows,
4-byte ones otherwise) into an S-slot ring.

The MMA's own fp32 accumulation is not round-to-nearest: measured on the H200 with KernelBench's
all-positive inputs (4096^3), one accumulator over all of K drifts to 50x eager's error (4.3e-5 vs
8.4e-7). So each k-tile is summed in its own accumulator (a dozen MMA steps) and added to the
total with an ordinary fp32 add; the drift then scales with the tile, not with K."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE
from agents.expert.opgraph import Node, OpGraph, Unsupported
from agents.expert.templates.gemm import GemmKnobs, GemmPlan, epilogue, kernel_args

BK = 32

# the PTX the kernel uses, behind small functions (tests/cpu_emulator.py gives C++ versions of these)
TF32_PRELUDE = r"""__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    // two instructions: the MMA reads only a TF32 operand's top 19 bits, so the high part is x with
    // its low 13 bits cleared (exact, truncated) and the low part the exact fp32 rest, which the MMA
    // truncates in turn (~2^-21 of x); rounding both (cvt.rna) took 4 integer ops more an element
    // and left the kernel bound on the integer pipe (ncu on the H200)
    hi = __float_as_uint(x) & 0xffffe000u; lo = __float_as_uint(x - __uint_as_float(hi));
}
__device__ __forceinline__ unsigned round_tf32(float x) {
    // plain TF32 operands rounded to nearest, as cuDNN's are: the MMA alone truncates, an error biased
    // towards zero that a following mean or pooling does not average away (50x eager's after a global
    // average pool on the H200, where rounding stays within eager's)
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ldsm_x4(unsigned* r, const float* row) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa));
}
template <int BYTES> __device__ __forceinline__ void cp_async(float* dst, const float* src, int valid_bytes) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(sa), "l"(src), "r"(valid_bytes));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(sa), "l"(src), "r"(valid_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
"""


def canonical_piece(t: str, per: int) -> tuple[str, str]:
    """Thread or chunk `t`'s 16-byte piece of a canonical k-contiguous tile of `per` pieces a row: (its row,
    its piece along k). A warp writes 8 rows by 4 pieces, its 16-byte writes covering the 32 banks 4 times
    (one row a core matrix row); `t / per` a row would put 8 writes on each of 16 banks."""
    return f"({t} & 7) + 8 * ({t} / {8 * per})", f"(({t} >> 3) % {per})"


@dataclass(frozen=True)
class Operand:
    """One operand's tile in shared memory: `rows` of the block's M (A) or N (B) by BK, stored
    k-contiguous ((rows, BK + 4): A (M,K), B (N,K)) or row-contiguous ((BK, rows + 8): A (K,M), B (K,N))."""
    name: str  # "A" or "B" (the kernel argument; `Ab`/`Bb` after the batch offset)
    rows: int  # tile rows: BM or BN
    total: int  # M or N
    K: int
    kcontig: bool
    vec: int  # floats per cp.async: 4 where the contiguous pitch is a multiple of 4, else 1
    canon: bool = False  # k-contiguous in wgmma's canonical no-swizzle layout (8-row x 16-byte core matrices)
    bk: int = BK  # the tile's K (the planes GEMM also runs 16)
    swz: bool = False  # canonical in the 128-byte swizzle (bk 32): piece c of row r at piece c ^ (r % 8)
    tail: bool = False  # the ring runs past K (whole folds): pieces there are zero-filled

    @property
    def ld(self) -> int:  # padded so the 32 lanes of a fragment read hit 32 banks
        return self.bk + 4 if self.kcontig else self.rows + 8

    @property
    def elems(self) -> int:
        if self.canon:
            return self.rows * self.bk
        return self.rows * self.ld if self.kcontig else self.bk * self.ld

    def at(self, r: str, k: str) -> str:
        """The shared offset of tile element (row r, k). Canonical: core matrix (r / 8, k / 4) at
        (r / 8) * SBO + (k / 4) * LBO (SBO = bk * 8 floats, LBO = 32 floats: K-adjacent ones touch)."""
        if self.canon and self.swz:  # 8-row atoms of 1 KB, a row's 16-byte pieces XORed with the row
            return f"(({r}) >> 3) * 256 + (({r}) & 7) * 32 + (((({k}) >> 2) ^ (({r}) & 7)) << 2) + (({k}) & 3)"
        if self.canon:
            return f"(({r}) >> 3) * {self.bk * 8} + (({k}) >> 2) * 32 + (({r}) & 7) * 4 + (({k}) & 3)"
        return f"({r}) * {self.ld} + ({k})" if self.kcontig else f"({k}) * {self.ld} + ({r})"

    def desc(self, tile: str, k: int | str) -> str:
        """wgmma's descriptor of this canonical tile (at `tile`) from k (floats, a number or an expression)
        on: in the swizzle k moves the start along the 128-byte row (the hardware XORs the address), else
        by core matrices (4 k of 8 rows each: 32 floats)."""
        if self.swz:
            return f"wg_desc_sw128({tile} + {k})"
        return f"wg_desc_sbo({tile} + {k * 8 if isinstance(k, int) else f'{k} * 8'}, {self.bk * 32})"

    def fast(self, threads: int) -> bool:
        """Whether `fast_setup`/`fast_loader` apply: 16-byte pieces of a canonical k-contiguous tile, each
        thread's pieces whole passes of the block apart (the same k piece, rows `threads / per` apart)."""
        per = self.bk // 4
        return (self.kcontig and self.canon and self.vec == 4 and threads % (8 * per) == 0
                and self.rows % (threads // per) == 0)

    def fast_setup(self, threads: int, base: str, r0: str, tag: str) -> str:
        """Before the ring: this thread's piece (row, k), its shared offset and one global pointer; where
        the tile can overhang the operand's rows, a flag a piece. A warp writes 8 rows by 4 pieces, 512
        bytes of core matrices in a row (no bank conflict)."""
        per, rs = self.bk // 4, threads // (self.bk // 4)
        row, piece = canonical_piece("tid", per)
        lines = [f"    const int {tag}r = {row}, {tag}k = {piece} * 4, "
                 f"{tag}o = {self.at(f'{tag}r', f'{tag}k')};",
                 f"    const float* {tag}g = {base} + ({r0} + {tag}r) * {self.K}LL + {tag}k;"]
        if self.total % self.rows:
            lines += [f"    const bool {tag}v{j} = {r0} + {tag}r + {j * rs} < {self.total};" for j in range(self.rows // rs)]
        return "\n".join(lines) + "\n"

    def fast_loader(self, threads: int, smem: str, base: str, tag: str, shift: int = 0) -> str:
        """One tile at k0 from fast_setup's pointer (`shift` floats on: another plane of the operand at the
        same offsets): constant steps, no 64-bit index math a piece; tests only where a row or the K tail
        can fall outside (one compare a piece)."""
        rs = threads // (self.bk // 4)
        out = []
        for j in range(self.rows // rs):
            conds = ([f"{tag}v{j}"] if self.total % self.rows else []) + ([f"k0 + {tag}k < {self.K}"] if self.K % self.bk or self.tail else [])
            src, dst = f"{tag}g + k0 + {j * rs * self.K + shift}LL", f"{smem} + {tag}o + {j * rs * self.bk}"
            if conds:
                ok = " && ".join(conds)
                out.append(f"            {{ const bool ok = {ok}; cp_async<16>({dst}, ok ? {src} : {base}, ok ? 16 : 0); }}")
            else:
                out.append(f"            cp_async<16>({dst}, {src}, 16);")
        return "\n".join(out)

    def loader(self, threads: int, smem: str, base: str, r0: str) -> str:
        v, per = self.vec, (self.bk if self.kcontig else self.rows) // self.vec
        chunks = (self.rows if self.kcontig else self.bk) * per
        if self.kcontig and self.canon and v == 4 and per in (4, 8) and self.rows % 8 == 0:
            row, piece = canonical_piece("c", per)
            rc = (f"const int r = {row}, kc = {piece} * 4; const long long gr = {r0} + r, gk = k0 + kc;\n"
                  f"                const int n = gr < {self.total} ? (int)max(0LL, min((long long){v}, {self.K} - gk)) : 0;\n"
                  f"                const float* src = {base} + gr * {self.K}LL + gk; float* dst = {smem} + {self.at('r', 'kc')};")
        elif self.kcontig:
            rc = (f"const int r = c / {per}, kc = (c % {per}) * {v}; const long long gr = {r0} + r, gk = k0 + kc;\n"
                  f"                const int n = gr < {self.total} ? (int)max(0LL, min((long long){v}, {self.K} - gk)) : 0;\n"
                  f"                const float* src = {base} + gr * {self.K}LL + gk; float* dst = {smem} + {self.at('r', 'kc')};")
        else:
            rc = (f"const int kr = c / {per}, rr = (c % {per}) * {v}; const long long gk = k0 + kr, gr = {r0} + rr;\n"
                  f"                const int n = gk < {self.K} ? (int)max(0LL, min((long long){v}, {self.total} - gr)) : 0;\n"
                  f"                const float* src = {base} + gk * {self.total}LL + gr; float* dst = {smem} + kr * {self.ld} + rr;")
        return (f"            for (int c = tid; c < {chunks}; c += {threads}) {{\n                {rc}\n"
                f"                cp_async<{4 * v}>(dst, n ? src : {base}, 4 * n);\n            }}")


def operands(p: GemmPlan, k: GemmKnobs) -> tuple[Operand, Operand]:
    a_k = p.a_layout == "mk"
    b_k = p.b_layout == "nk"
    a = Operand("A", k.BM, p.M, p.K, a_k, 4 if (p.K if a_k else p.M) % 4 == 0 else 1)
    b = Operand("B", k.BN, p.N, p.K, b_k, 4 if (p.K if b_k else p.N) % 4 == 0 else 1)
    return a, b


def splits(p: GemmPlan, k: GemmKnobs) -> tuple[int, int]:
    """Split-K as run: (ranges, K per range, a multiple of BK); ranges that would be empty are dropped."""
    kt = -(-p.K // BK)
    per = -(-kt // max(1, min(k.splitk, kt)))
    return -(-kt // per), per * BK


def grid(p: GemmPlan, k: GemmKnobs) -> tuple[int, int, int]:
    """M tiles on x, N tiles on y, the batch (times the split-K ranges) on z (kernel_source's block order)."""
    z = p.batch * splits(p, k)[0]
    if -(-p.N // k.BN) > 65535 or z > 65535:
        raise Unsupported("more than 65535 column tiles or batches")
    return (-(-p.M // k.BM), -(-p.N // k.BN), z)


def partials_node(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> Node:
    """Split-K's workspace: each range's fp32 partial product, (ranges, batch, M, N) flat."""
    return Node(f"{p.gemm.name}_partials", "input", shape=(splits(p, k)[0] * p.batch * p.M * p.N,), dtype="float32")


REDUCE_BLOCK = 256


def reduce_grid(p: GemmPlan, sms: int) -> tuple[int]:
    return (max(1, min(-(-p.batch * p.M * p.N // REDUCE_BLOCK), 16 * sms)),)


def reduce_source(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """`egg_gemm_splitk`: the split-K partials summed in range order (deterministic), then the bias and
    the pointwise epilogue, a thread per output element; arguments: out, the partials, then the GEMM's."""
    total, ranges = p.batch * p.M * p.N, splits(p, k)[0]
    epi, v = epilogue(g, p, "acc_v", "i", "        ")
    args = kernel_args(g, p).split(", ", 1)
    return f"""
extern "C" __global__ void __launch_bounds__({REDUCE_BLOCK}) egg_gemm_splitk({args[0]}, const float* __restrict__ P, {args[1]}) {{
    for (long long i = (long long)blockIdx.x * {REDUCE_BLOCK} + threadIdx.x; i < {total}LL; i += (long long)gridDim.x * {REDUCE_BLOCK}) {{
        const long long bz = i / {p.M * p.N}LL, m = (i / {p.N}LL) % {p.M}LL, n = i % {p.N}LL;
        float acc_v = 0.0f;
        for (int s = 0; s < {ranges}; ++s) acc_v += P[s * {total}LL + i];
{epi}
        out[i] = from_f<{CTYPE[g.output.dtype]}>({v});
        (void)bz; (void)m; (void)n;  // the epilogue reads what it needs
    }}
}}
"""


def shared_bytes(p: GemmPlan, k: GemmKnobs) -> int:
    a, b = operands(p, k)
    return k.stages * (a.elems + b.elems) * 4


def aligned16(p: GemmPlan, k: GemmKnobs) -> bool:
    """Whether the kernel issues 16-byte copies (the host then checks its inputs' alignment)."""
    return any(o.vec == 4 for o in operands(p, k))


def render(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    if p.dtype != "float32":
        raise Unsupported("3xTF32 is for fp32 operands")
    A, B = operands(p, k)
    M, N, K = p.M, p.N, p.K
    setup = (f"    const float* Ab = A + {'(long long)bz * ' + str(M * K) + 'LL' if p.a_batched else '0'};\n"
             f"    const float* Bb = B + {'(long long)bz * ' + str(K * N) + 'LL' if p.b_batched else '0'};")
    ranges, kc = splits(p, k)
    if ranges > 1:  # split-K: the raw partial product into the workspace (`out` here), egg_gemm_splitk after
        if k.wgmma:
            raise Unsupported("split-K on the warpgroup MMA")
        store = f"                    out[((long long)blockIdx.z * {M}LL + m) * {N}LL + n] = acc[mi][ni][2 * h + e];"
        args = "float* __restrict__ out, " + kernel_args(g, p).split(", ", 1)[1]
        return kernel_source("egg_gemm", args, k, A, B, M, N, K, setup, store, ksplit=(kc, p.batch)) + reduce_source(g, p, k)
    epi, v, store = output_store(g, p)
    if k.planes:
        return render_planes(g, p, k, store)
    if k.wgmma:
        return kernel_source_wgmma3("egg_gemm", kernel_args(g, p), k, A, B, M, N, K, setup, store)
    if k.ostage:
        if g.output.dtype != "float32" or not staged_fits(p, k):
            raise Unsupported("the output tile staged through shared memory (fp32, within the ring's space)")
        return kernel_source("egg_gemm", kernel_args(g, p), k, A, B, M, N, K, setup, store, staged=(epi, v))
    return kernel_source("egg_gemm", kernel_args(g, p), k, A, B, M, N, K, setup, store)


def _reads(A: Operand, B: Operand, k: GemmKnobs, NI: int, split: int, rounded: bool = False) -> tuple[str, str, int]:
    """Shared -> fragment code for A and B (split into TF32 high and low parts, or rounded to TF32 unless
    `rounded`: the tiles hold TF32 values already), and the B step."""
    def conv(x: str, hi: str, lo: str) -> str:
        if split == 3:
            return f"split_tf32({x}, {hi}, {lo});"
        return f"{hi} = __float_as_uint({x});" if rounded else f"{hi} = round_tf32({x});"
    a_reads = "\n".join("                    " + conv(f"As_s[{A.at(f'rb + g + {8 * (q % 2)}', f'kk + t + {4 * (q // 2)}')}]",
                                                       f"ah[mi][{q}]", f"al[mi][{q}]") for q in range(4))
    b_reads = "\n".join("                    " + conv(f"Bs_s[{B.at('cb + g', f'kk + t + {4 * q}')}]", f"bh[ni][{q}]", f"bl[ni][{q}]")
                        for q in range(2))
    b_step = 1
    if k.ldm:  # ldmatrix: a k-contiguous tile's 8x4-float blocks are a b16 8x8 matrix each, one row a lane
        if not (A.kcontig or B.kcontig):
            raise Unsupported("ldmatrix needs a k-contiguous operand")
        if A.kcontig:  # matrices a0..a3: rows 0-7 / 8-15 by k 0-3 / 4-7
            a_reads = (f"                    unsigned r[4]; ldsm_x4(r, As_s + {A.at('rb + (lane & 7) + ((lane >> 3) & 1) * 8', 'kk + (lane >> 4) * 4')});\n"
                       "                    #pragma unroll\n"
                       f"                    for (int q = 0; q < 4; ++q) {conv('__uint_as_float(r[q])', 'ah[mi][q]', 'al[mi][q]')}")
        if B.kcontig and NI % 2 == 0:  # two n8 tiles a load: b[ni][0..1], b[ni + 1][0..1]
            b_step = 2
            b_reads = (f"                    unsigned r[4]; ldsm_x4(r, Bs_s + {B.at('cb + (lane & 7) + (lane >> 4) * 8', 'kk + ((lane >> 3) & 1) * 4')});\n"
                       "                    #pragma unroll\n"
                       "                    for (int q = 0; q < 4; ++q)\n"
                       f"                        {conv('__uint_as_float(r[q])', 'bh[ni + q / 2][q % 2]', 'bl[ni + q / 2][q % 2]')}")
    return a_reads, b_reads, b_step


def _ring_head(K: int, S: int, load, ahead: int | None = None, kc: int = 0, bk: int = BK, kt: str | None = None) -> str:
    """The ring's first `ahead` (default S - 1) tiles, a commit group each (empty past the last tile).
    `kc`: split-K, this block's K range is [kb, kb + kc) (`kb` set by the kernel), k0 stays absolute.
    `kt`: the block's own k-tile count where it has fewer than K's (a transposed conv's phase)."""
    kt = kt or (f"({K} + {bk - 1}) / {bk}" if not kc else f"(int)((min({K}LL - kb, {kc}LL) + {bk - 1}) / {bk})")
    return f"""    const int KT = {kt};
    #pragma unroll
    for (int s = 0; s < {S - 1 if ahead is None else ahead}; ++s) {{
        if (s < KT) {{
            const long long k0 = {"kb + " if kc else ""}(long long)s * {bk};
{load("s")}
        }}
        cp_async_commit();
    }}
"""


def _ring_refill(S: int, load, ahead: int | None = None, kc: int = 0, bk: int = BK) -> str:
    """Inside step kt, after the barrier: tile kt + ahead (default S - 1) into the slot it maps to (the
    one step kt - 1 read, or with ahead S - 2 the one step kt - 2 read)."""
    return f"""        {{
            const int kn = kt + {S - 1 if ahead is None else ahead};
            if (kn < KT) {{
                const long long k0 = {"kb + " if kc else ""}(long long)kn * {bk};
{load(f"kn % {S}")}
            }}
            cp_async_commit();
        }}
"""


def wg_ring(K: int, S: int, load, lead: bool, bk: int = BK, kt: str | None = None) -> tuple[str, str, str, str]:
    """A warpgroup-MMA kernel's cp.async ring, one step's MMAs left in flight (wait_group 1 after each
    step's): (the head before the loop, the wait for step kt's tile, the refill after the step's barrier,
    the refill after its MMAs). Tiles S - 2 ahead: step kt refills the slot of tile kt - 2, which every
    warpgroup has waited for before the barrier. `lead`: S - 1 ahead (half as many tiles in flight more
    for 3 stages, where a step's MMAs hid one tile's latency only), the slot of tile kt - 1 refilled after
    the step's MMAs are issued and a second barrier (every warpgroup then past its wait for kt - 1's)."""
    if lead:
        return (_ring_head(K, S, load, S - 1, bk=bk, kt=kt), str(S - 2), "",
                "        __syncthreads();  // every warpgroup's MMAs of step kt - 1 done: its slot takes tile kt + S - 1\n"
                + _ring_refill(S, load, S - 1, bk=bk))
    return _ring_head(K, S, load, S - 2, bk=bk, kt=kt), str(S - 3), _ring_refill(S, load, S - 2, bk=bk), ""


def _wg_store(NI: int, M: int, N: int, store: str, rows: str) -> str:
    """The warpgroup MMA's epilogue: register (ni, h, e) of this thread is row `rows` + g + 8h, column
    ni * 8 + 2t + e of the tile (the m64nNk8 D fragment)."""
    return f"""    cp_async_wait<0>();
    const int mi = 0;
    #pragma unroll
    for (int ni = 0; ni < {NI}; ++ni)
        #pragma unroll
        for (int h = 0; h < 2; ++h)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {{
                const long long m = m0 + {rows} + g + 8 * h;
                const long long n = n0 + ni * 8 + 2 * t + e;
                if (m < {M} && n < {N}) {{
{store}
                }}
            }}
}}
"""


# a thread's two adjacent output columns stored as one write (the wgmma D fragment holds them in e = 0, 1)
PAIR_PRELUDE = "template <typename T> struct alignas(2 * sizeof(T)) egg_pair { T x, y; };\n"


def pair_store(g: OpGraph, p: GemmPlan, NI: int, rows: str) -> str:
    """The warpgroup MMA's epilogue (the kernel's end but its closing brace): register (ni, h, e) of this thread is
    row `rows` + g + 8h, column ni * 8 + 2t + e of the tile, the two e of a row adjacent columns, stored as one
    write of both (an even N keeps each pair whole and aligned; an odd N stores them apart)."""
    M, N, T = p.M, p.N, CTYPE[g.output.dtype]
    epi, v = epilogue(g, p, "acc[0][ni][2 * h + e]", f"(((long long)bz * {M}LL + m) * {N}LL + n)", " " * 20)
    at = f"out + ((long long)bz * {M}LL + m) * {N}LL + nb"
    write = (f"*reinterpret_cast<egg_pair<{T}>*>({at}) = egg_pair<{T}>{{from_f<{T}>(pv[0]), from_f<{T}>(pv[1])}};" if N % 2 == 0 else
             f"{T}* o = {at};\n            o[0] = from_f<{T}>(pv[0]);\n            if (nb + 1 < {N}) o[1] = from_f<{T}>(pv[1]);")
    return f"""    #pragma unroll
    for (int ni = 0; ni < {NI}; ++ni)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
            const long long m = m0 + {rows} + g + 8 * h, nb = n0 + ni * 8 + 2 * t;
            if (m >= {M} || nb >= {N}) continue;
            float pv[2] = {{0.0f, 0.0f}};
            #pragma unroll
            for (int e = 0; e < 2; ++e) {{
                const long long n = nb + e;
                if (n < {N}) {{
{epi}
                    pv[e] = {v};
                }}
            }}
            {write}
        }}
"""


def _xyz_tiles(k: GemmKnobs, zs: str = "const int bz = blockIdx.z;", note: bool = True) -> str:
    """The block's tile in launch order: M tiles on x, N tiles on y, `zs` (bz's definition) from z."""
    return ("    // M tiles on x (up to 2^31 - 1 blocks: a convolution's output pixels pass 65535 tiles), N tiles on y\n" if note else "") + \
        f"""    const long long m0 = (long long)blockIdx.x * {k.BM}, n0 = (long long)blockIdx.y * {k.BN};
    {zs}"""


def kernel_source(name: str, args: str, k: GemmKnobs, A: Operand, B: Operand, M: int, N: int, K: int, setup: str,
                  store: str, a_loader=None, split: int = 3, b_loader=None, rounded: bool = False,
                  ksplit: tuple[int, int] = (0, 1), staged: tuple[str, str] | None = None, tiles: str | None = None,
                  kt: str | None = None) -> str:
    """The tensor-core main loop around pluggable parts: `setup` (statements after `bz`, defining the
    operand bases `Ab` and `Bb`), `a_loader(smem)` (A's tile copy; default: A read in place),
    `b_loader(smem)` likewise for B, `store` (inside `if (m < M && n < N)`, the accumulator `acc[mi][ni][2 * h + e]` at GEMM row m,
    column n). `split` 3: 3xTF32 (fp32-grade); 1: plain TF32 (where the reference itself runs TF32), each
    operand rounded to nearest as it is read, or before (`rounded`: the staged tensors hold TF32 values).
    `ksplit` (kc, batch): split-K, blockIdx.z is split * batch + bz and the block sums K [kb, kb + kc).
    `tiles`: statements defining the block's m0, n0 and bz in place of (x, y, z) (another launch order).
    `kt`: the block's k-tiles where fewer than K's (a transposed conv's phase; not with split-K).
    `staged` (epilogue code, its value): instead of `store`, the fp32 values go to a shared-memory tile
    (the ring's space) and from there to `out`, row-major (bz, M, N), in 16-byte stores: a GEMM whose
    output outweighs its operands (small K) is bound by its stores, which from the MMA's fragments are
    8-byte pieces of eight rows."""
    TMW, TNW = k.BM // k.WM, k.BN // k.WN
    kc, nb = ksplit
    zs = (f"const int bz = blockIdx.z % {nb}; (void)bz;\n    const long long kb = (long long)(blockIdx.z / {nb}) * {kc}LL;"
          if kc else "const int bz = blockIdx.z;")
    MI, NI = TMW // 16, TNW // 8
    if MI < 1 or NI < 1 or TMW % 16 or TNW % 8 or k.stages < 2:
        raise Unsupported("tensor-core tile shape")
    T, S = k.threads(True), k.stages

    def load(slot: str) -> str:
        a = a_loader(f"As + ({slot}) * {A.elems}") if a_loader else A.loader(T, f"As + ({slot}) * {A.elems}", "Ab", "m0")
        b = b_loader(f"Bs + ({slot}) * {B.elems}") if b_loader else B.loader(T, f"Bs + ({slot}) * {B.elems}", "Bb", "n0")
        return a + "\n" + b
    a_reads, b_reads, b_step = _reads(A, B, k, NI, split, rounded)
    if split == 3:
        frags = f"unsigned ah[{MI}][4], al[{MI}][4], bh[{NI}][2], bl[{NI}][2];"
        mmas = """mma_tf32(part[mi][ni], al[mi], bh[ni]);  // small terms first
                        mma_tf32(part[mi][ni], ah[mi], bl[ni]);
                        mma_tf32(part[mi][ni], ah[mi], bh[ni]);"""
    else:  # plain TF32: its own rounding (2^-11 a product) dwarfs the accumulation's drift, so no
        # per-tile sum (which costs a second accumulator's registers, and with them occupancy)
        frags = f"unsigned ah[{MI}][4], bh[{NI}][2];"
        mmas = "mma_tf32(acc[mi][ni], ah[mi], bh[ni]);"
    if split == 3 and k.order == "term":  # a sweep a product: no MMA waits on the one just issued
        terms = ("al[mi], bh[ni]", "ah[mi], bl[ni]", "ah[mi], bh[ni]")  # small terms first
        body = [f"for (int ni = 0; ni < {NI}; ++ni) mma_tf32(part[mi][ni], {t});" for t in terms]
    else:
        body = [f"for (int ni = 0; ni < {NI}; ++ni) {{\n                        {mmas}\n                    }}"]
    sweeps = "\n".join(f"""                #pragma unroll
                for (int mi = 0; mi < {MI}; ++mi)
                    #pragma unroll
                    {b}""" for b in body)
    part_init = f"""            float part[{MI}][{NI}][4];  // this tile's sum, then into the total (see the module's note)
            #pragma unroll
            for (int mi = 0; mi < {MI}; ++mi)
                #pragma unroll
                for (int ni = 0; ni < {NI}; ++ni)
                    #pragma unroll
                    for (int q = 0; q < 4; ++q) part[mi][ni][q] = 0.0f;
""" if split == 3 else ""
    part_add = f"""
            #pragma unroll
            for (int mi = 0; mi < {MI}; ++mi)
                #pragma unroll
                for (int ni = 0; ni < {NI}; ++ni)
                    #pragma unroll
                    for (int q = 0; q < 4; ++q) acc[mi][ni][q] += part[mi][ni][q];""" if split == 3 else ""
    compute = f"""{part_init}            #pragma unroll
            for (int kk = 0; kk < {BK}; kk += 8) {{
                {frags}
                #pragma unroll
                for (int mi = 0; mi < {MI}; ++mi) {{
                    const int rb = wm * {TMW} + mi * 16;
{a_reads}
                }}
                #pragma unroll
                for (int ni = 0; ni < {NI}; ni += {b_step}) {{
                    const int cb = wn * {TNW} + ni * 8;
{b_reads}
                }}
{sweeps}
            }}
{part_add}"""
    # An S-slot ring: S - 1 tiles in flight while one is computed; one barrier a step (it also frees
    # the slot computed last step, refilled this step). Every step commits a group, empty or not,
    # so `wait <S-2>` always means "tile kt has landed".
    return f"""{PRELUDE}{TF32_PRELUDE}
extern "C" __global__ void __launch_bounds__({T}) {name}({args}) {{
    extern __shared__ __align__(16) unsigned char smem[];
    float* As = reinterpret_cast<float*>(smem);
    float* Bs = As + {S} * {A.elems};
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / {k.WN}, wn = warp % {k.WN};
{tiles or _xyz_tiles(k, zs)}
{setup}
    float acc[{MI}][{NI}][4];
    #pragma unroll
    for (int mi = 0; mi < {MI}; ++mi)
        #pragma unroll
        for (int ni = 0; ni < {NI}; ++ni)
            #pragma unroll
            for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
{_ring_head(K, S, load, kc=kc, kt=None if kc else kt)}    for (int kt = 0; kt < KT; ++kt) {{
        cp_async_wait<{S - 2}>();
        __syncthreads();
{_ring_refill(S, load, kc=kc)}        {{
            const float* As_s = As + (kt % {S}) * {A.elems};
            const float* Bs_s = Bs + (kt % {S}) * {B.elems};
{compute}
        }}
    }}
    cp_async_wait<0>();
{_staged_store(k, M, N, T, MI, NI, TMW, TNW, staged) if staged else _fragment_store(M, N, MI, NI, TMW, TNW, store)}}}
"""


def _fragment_store(M: int, N: int, MI: int, NI: int, TMW: int, TNW: int, store: str) -> str:
    return f"""    #pragma unroll
    for (int mi = 0; mi < {MI}; ++mi)
        #pragma unroll
        for (int ni = 0; ni < {NI}; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {{
                    const long long m = m0 + wm * {TMW} + mi * 16 + g + 8 * h;
                    const long long n = n0 + wn * {TNW} + ni * 8 + 2 * t + e;
                    if (m < {M} && n < {N}) {{
{store}
                    }}
                }}
"""


def staged_ld(k: GemmKnobs) -> int:
    return k.BN + 4  # the tile's pitch: 16-byte rows, the fragment writes spread over the banks


def _staged_store(k: GemmKnobs, M: int, N: int, T: int, MI: int, NI: int, TMW: int, TNW: int,
                  staged: tuple[str, str]) -> str:
    epi, v = staged
    ld, q = staged_ld(k), k.BN // 4
    vec = N % 4 == 0  # every 16-byte piece of a row inside it, and aligned
    row = f"out + ((long long)bz * {M}LL + m) * {N}LL + n"
    put = (f"""                if (n + 4 <= {N}) *reinterpret_cast<float4*>({row}) = *reinterpret_cast<const float4*>(Cs + rl * {ld} + cl);
                else""" if vec else "")
    return f"""    __syncthreads();  // every warp is done with the ring: its shared memory takes the output tile
    float* Cs = reinterpret_cast<float*>(smem);
    #pragma unroll
    for (int mi = 0; mi < {MI}; ++mi)
        #pragma unroll
        for (int ni = 0; ni < {NI}; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {{
                    const int rl = wm * {TMW} + mi * 16 + g + 8 * h, cl = wn * {TNW} + ni * 8 + 2 * t + e;
                    const long long m = m0 + rl, n = n0 + cl;
                    if (m < {M} && n < {N}) {{
{epi}
                        Cs[rl * {ld} + cl] = {v};
                    }}
                }}
    __syncthreads();
    for (int c = tid; c < {k.BM * q}; c += {T}) {{
        const int rl = c / {q}, cl = (c % {q}) * 4;
        const long long m = m0 + rl, n = n0 + cl;
        if (m < {M}) {{
{put}
                for (int u = 0; u < 4; ++u)
                    if (n + u < {N}) ({row})[u] = Cs[rl * {ld} + cl + u];
        }}
    }}
"""


def staged_fits(p: GemmPlan, k: GemmKnobs) -> bool:
    return k.BM * staged_ld(k) * 4 <= shared_bytes(p, k)


# -- Hopper's warpgroup MMA (plain TF32): both operands from shared memory in the canonical layout ----------
WGMMA_NS = (64, 128, 256)


def _wgmma_fn(n: int, kind: str = "tf32", tb: bool = False) -> str:
    """`wgmma_<kind>_n<n>(d, da, db)`: both operands from shared memory; tf32 steps k8, the 16-bit kinds
    (bf16, f16) k16 and take the two transpose immediates (0: K-major); `tb` (`..._tb`, 16-bit only): B
    MN-major (N contiguous: a row-major (K, N) B read as it is)."""
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    ks, trans = ("k8", "") if kind == "tf32" else ("k16", f", 0, {int(tb)}")
    return (f"__device__ __forceinline__ void wgmma_{kind}_n{n}{'_tb' if tb else ''}(float* d, unsigned long long da, unsigned long long db) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n // 2 + 2}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}{ks}.f32.{kind}.{kind} {{{regs}}}, %{n // 2}, %{n // 2 + 1}, p, 1, 1{trans};\\n}}\\n"\n'
            f'                 : {outs}\n'
            f'                 : "l"(da), "l"(db), "r"(1));\n}}\n')


def _wgmma_rs_fn(n: int) -> str:
    """A from registers (this warp's m16k8 fragment, mma.m16n8k8's layout), B from shared memory."""
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    a = ", ".join(f"%{n // 2 + i}" for i in range(4))
    return (f"__device__ __forceinline__ void wgmma_tf32_rs_n{n}(float* d, const unsigned* a, unsigned long long db) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n // 2 + 5}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{{regs}}}, {{{a}}}, %{n // 2 + 4}, p, 1, 1;\\n}}\\n"\n'
            f'                 : {outs}\n'
            f'                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));\n}}\n')


WGMMA_PRELUDE = r"""__device__ __forceinline__ unsigned long long wg_desc(const float* p) {
    // no swizzle; LBO (K-adjacent core matrices) 128 bytes, SBO (8-row groups) BK * 8 floats = 1024 bytes
    const unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32);
}
__device__ __forceinline__ unsigned long long wg_desc_sbo(const float* p, unsigned sbo) {
    // the same with another 8-row group stride (a tile of K 16: 512 bytes)
    const unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32);
}
__device__ __forceinline__ unsigned long long wg_desc_sw128(const float* p) {
    // K-major in the 128-byte swizzle: 8-row atoms 1024 bytes apart (SBO), layout type 1 (bits 62-63)
    const unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
    return ((a & 0x3FFFF) >> 4) | (1ULL << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ULL << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
""" + "".join(_wgmma_fn(n) for n in WGMMA_NS) + "".join(_wgmma_rs_fn(n) for n in WGMMA_NS)


# the TF32 MMA 32 columns wide: the conv's tile where a group has at most 32 output channels (a 64-wide tile would
# multiply half zeros); its own prelude, so the other kernels' sources stay as they were
WGMMA_N32 = _wgmma_fn(32)


# the tensor-memory accelerator and shared-memory barriers (the `tma` GEMMs; tests/cpu_emulator.py gives C++ versions)
TMA_PRELUDE = r"""struct __align__(64) EggTmap { unsigned long long v[16]; };  // a CUtensorMap's 128 opaque bytes
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(b)), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_u32(b)) : "memory"); }
__device__ __forceinline__ void mbar_expect(unsigned long long* b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_u32(b)), "r"(bytes) : "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned parity) {
    // until the phase of this parity has completed (a fresh barrier: parity 1 passes at once)
    asm volatile("{\n.reg .pred p;\nEGG_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra EGG_WAIT;\n}\n"
                 :: "r"(smem_u32(b)), "r"(parity) : "memory"); }
__device__ __forceinline__ void tma_load(void* dst, const EggTmap* m, int k, int row, int batch, unsigned long long* b) {
    // a box of the map at (k, row, batch) into shared memory; its bytes complete barrier b's transaction
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(smem_u32(dst)), "l"(reinterpret_cast<unsigned long long>(m)), "r"(k), "r"(row), "r"(batch), "r"(smem_u32(b))
                 : "memory"); }
__device__ __forceinline__ void tma_load4(void* dst, const EggTmap* m, int c0, int c1, int c2, int c3, unsigned long long* b) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 :: "r"(smem_u32(dst)), "l"(reinterpret_cast<unsigned long long>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                    "r"(smem_u32(b)) : "memory"); }
__device__ __forceinline__ void tma_load5(void* dst, const EggTmap* m, int c0, int c1, int c2, int c3, int c4, unsigned long long* b) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
                 :: "r"(smem_u32(dst)), "l"(reinterpret_cast<unsigned long long>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
                    "r"(smem_u32(b)) : "memory"); }
template <int N> __device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N> __device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }
"""


# a thread-block cluster's TMA ring (gemm_wgmma16 `mcast`; tests/cpu_emulator.py gives C++ versions): a box copied
# into every block of `mask` at the same offset, each block's barrier at that offset completing its bytes; a slot
# released to block `rank` of the cluster; the wait that acquires such releases (they come from other blocks)
MCAST_PRELUDE = r"""__device__ __forceinline__ void tma_load_mc(void* dst, const EggTmap* m, int k, int row, int batch, unsigned long long* b,
                                            unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
                 :: "r"(smem_u32(dst)), "l"(reinterpret_cast<unsigned long long>(m)), "r"(k), "r"(row), "r"(batch), "r"(smem_u32(b)),
                    "h"(mask) : "memory"); }
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* b, unsigned rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n"
                 :: "r"(smem_u32(b)), "r"(rank) : "memory"); }
__device__ __forceinline__ void mbar_wait_cluster(unsigned long long* b, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nEGG_WAIT_C:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n@!p bra EGG_WAIT_C;\n}\n"
                 :: "r"(smem_u32(b)), "r"(parity) : "memory"); }
"""


def tma_setup(S: int, NW: int, after: str, peers: int = 1) -> str:
    """A TMA ring's barriers, after the ring's tiles (`after`: where they end): `full` (the producer's
    arrival with the bytes, then the bytes) and `empty` (one arrival a consumer warpgroup) a slot, set up by
    one thread before the block's only barrier. `peers` (a cluster multicasting into each block's ring): a
    slot is empty once every block's consumers are done with it (the producers write into each other's
    slots), and no block starts before every block's barriers are set up."""
    return f"""    unsigned long long* full = reinterpret_cast<unsigned long long*>({after});
    unsigned long long* empty = full + {S};
    if (tid == 0) {{
        for (int s = 0; s < {S}; ++s) {{ mbar_init(full + s, 1); mbar_init(empty + s, {NW * peers}); }}
        mbar_init_fence();
    }}
    {"cluster_sync();  // the cluster's barriers set up before any block copies into another's ring" if peers > 1 else "__syncthreads();"}
"""


def tma_barrier_bytes(S: int) -> int:
    """The shared memory tma_setup's barriers take after the ring: two of 8 bytes a slot."""
    return 16 * S


def tma_producer(S: int, NW: int, KT: str | int, nbytes: int, loads: list[str], tiles: tuple[str, str] | None = None,
                 peers: int = 1) -> str:
    """The producer warpgroup (the last, `wg == NW`): one thread fills slot kt % S with k-tile kt by the
    `loads` (TMA, each naming `s`, `kt` and `full + s`) once the slot's tile of S steps before is consumed;
    the rest of the warpgroup leaves, and with two consumer warpgroups its registers go to them.
    `tiles` (persistent: the tile count, the statements, unindented, decoding `tile` into its coordinates): the block's tiles
    in turn, the ring's steps counted across them (`it`), so the next tile's loads run under this one's
    epilogue. `peers` (tma_setup's): the slot's release acquired at the cluster's scope (the other blocks'
    consumers arrive on it), and the warpgroup waits at the cluster's last barrier before it leaves."""
    c = "it" if tiles else "kt"
    body = "\n".join(f"                {ln}" for ln in loads)
    wait = "mbar_wait_cluster" if peers > 1 else "mbar_wait"
    ring = f"""            for (int kt = 0; kt < {KT}; ++kt{', ++it' if tiles else ''}) {{
                const int s = {c} % {S};
                if ({c} >= {S}) {wait}(empty + s, (({c} / {S}) - 1) & 1);  // the slot's tile of S steps ago consumed
                mbar_expect(full + s, {nbytes});
{body}
            }}
"""
    if tiles:
        ring = (f"            int it = 0;\n            for (int tile = blockIdx.x; tile < {tiles[0]}; tile += gridDim.x) {{\n"
                + _indent(tiles[1], 16) + _indent(ring, 4) + "            }\n")
    return f"""    if (wg == {NW}) {{  // the producer warpgroup
{"        regs_dec<40>();  // the producer's registers go to the consumers' accumulators" + chr(10) if NW == 2 else ""}        if (tid == {NW * 128}) {{
{ring}        }}
{"        cluster_sync();  // the consumers' (tma_mainloop's `peers`)" + chr(10) if peers > 1 else ""}        return;
    }}
{"    regs_inc<232>();" + chr(10) if NW == 2 else ""}"""


# B's descriptor at the k-step `kk` words into a slot's K-major tile (tma_mainloop's `b_desc`)
B_K_MAJOR = "wg_desc_sw128(sB_s + {kk})"


def _tma_tile(S: int, KT: int | str, EA: int, EB: int, words: int, NI: int, mma: str, c: str, a_rows: str,
              before_wait: str = "", b_desc: str = B_K_MAJOR, peers: int = 1) -> str:
    """One tile's consumer loop (tma_mainloop's, tma_pingpong's): `d` zeroed, KT steps counted by `c` ("kt", or "it"
    running on across tiles) each waiting for its slot, issuing `mma` on the slot's tiles (A from `a_rows` on, B
    through `b_desc` formatted with the step's `kk`) and giving the slot before it back, then `before_wait`, the
    last MMAs waited for and `acc` as the stores read it."""
    steps = "\n".join(f"        {mma}(d, wg_desc_sw128(sA_s + {kk}), {b_desc.format(kk=kk)});" for kk in range(0, words, 8))
    return f"""    float d[{NI * 4}];
    #pragma unroll
    for (int q = 0; q < {NI * 4}; ++q) d[q] = 0.0f;
    for (int kt = 0; kt < {KT}; ++kt{', ++it' if c == 'it' else ''}) {{
        const int s = {c} % {S};
        mbar_wait(full + s, ({c} / {S}) & 1);
        const float* sA_s = sA + s * {EA}{a_rows};
        const float* sB_s = sB + s * {EB};
        wgmma_fence();
{steps}
        wgmma_commit();
        wgmma_wait1();
{tma_consumer_release(S, c, first="kt", peers=peers)}    }}
{before_wait}    wgmma_wait0();
    float acc[1][{NI}][4];
    #pragma unroll
    for (int q = 0; q < {NI * 4}; ++q) acc[0][q / 4][q % 4] = d[q];
"""


def tma_mainloop(S: int, KT: int | str, EA: int, EB: int, words: int, NI: int, mma: str,
                 tiles: tuple[str, str] | None = None, store: str = "", b_desc: str = B_K_MAJOR, peers: int = 1) -> str:
    """The consumer warpgroups' loop of a one-MMA-chain TMA ring (the 16-bit GEMM, the conv): wait for step
    kt's tiles (A's rows of this warpgroup, `words` a row of 128 bytes, and B's), issue the MMA function
    `mma` on each 32-byte k-step of them (swizzled tiles) into `d`, keep one step's MMAs in flight and
    release the slot before it; then `acc` as the stores read it. `tiles`
    (tma_producer's): the block's tiles in turn, each's last slot released once its MMAs are done, then
    `store` (its epilogue). `b_desc`: B's descriptor at a k-step (_tma_tile's); `peers` (tma_setup's): each slot
    released to every block of the cluster (tma_consumer_release's)."""
    c = "it" if tiles else "kt"
    loop = _tma_tile(S, KT, EA, EB, words, NI, mma, c, f" + wg * {64 * words}", b_desc=b_desc, peers=peers)
    if not tiles:
        return loop
    return (f"    int it = 0;\n    for (int tile = blockIdx.x; tile < {tiles[0]}; tile += gridDim.x) {{\n"
            + _indent(tiles[1], 8) + _indent(loop, 4)
            + tma_consumer_release(S, "it", first="", peers=peers, note="  // the tile's last slot")
            + _indent(store, 4) + "    }\n")


# Named barriers (bar.sync / bar.arrive on ids past __syncthreads' 0, counting only the threads named): a ping-pong
# kernel's two consumer warpgroups hand each other the tensor cores
NAMED_BAR_PRELUDE = r"""__device__ __forceinline__ void named_bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(n) : "memory"); }
"""


def tma_pingpong(S: int, KT: int | str, EA: int, EB: int, words: int, NI: int, mma: str, tiles: tuple[str, str],
                 store: str, b_desc: str = B_K_MAJOR) -> str:
    """The consumers of a persistent TMA ring (tma_producer's `tiles`, two consumer warpgroups) in ping-pong: the
    block's tiles (each a 64-row A tile, EA floats a slot) taken by the warpgroups in turn, so one's epilogue runs
    under the other's MMAs (CUTLASS's sm90 "pingpong" schedule; cooperative, both warpgroups on one tile, serialise
    their epilogues after their MMAs). The ring's steps stay in tile order: a warpgroup's tile i starts at step
    i * KT and waits for the other's tile i - 1 to have issued its MMAs (a named barrier), so the slots it waits
    on are the next phase of each (an mbarrier's parity tells only one phase from the next) and the two
    warpgroups' MMAs never interleave. A slot goes back to the producer from its one consumer (`empty` counts 1)."""
    after = f"    if (tile + gridDim.x < {tiles[0]}) named_bar_arrive(1 + (wg ^ 1), 256);  // the next tile's turn: the other's\n"
    loop = _indent(_tma_tile(S, KT, EA, EB, words, NI, mma, "it", "", after, b_desc), 4)
    return f"""    int i = wg;  // this warpgroup's turns: every other tile of the block's
    for (long long tile = blockIdx.x + (long long)wg * gridDim.x; tile < {tiles[0]}; tile += 2LL * gridDim.x, i += 2) {{
{_indent(tiles[1], 8)}        if (i > 0) named_bar_sync(1 + wg, 256);  // the other warpgroup's tile i - 1 has issued its MMAs
        int it = i * {KT};
{loop}{tma_consumer_release(S, "it", first="", note="  // the tile's last slot")}{_indent(store, 4)}    }}
"""


def _indent(code: str, n: int) -> str:
    """`code` with every line (blank ones too) n spaces further in."""
    return textwrap.indent(code, " " * n, lambda _: True)


def tma_consumer_release(S: int, kt: str, indent: str = "        ", first: str | None = None, peers: int = 1,
                         note: str = "") -> str:
    """After a wait that leaves step `kt`'s MMAs at most in flight: step kt - 1's slot back to the producer
    (one thread a warpgroup; every thread of it has passed that tile's wait, the MMAs being collective).
    `first`: the step within the tile (none released before a tile's first; default `kt` itself; "": no test, a
    tile's last slot after its MMAs are done). `peers`: to every block of the cluster (thread r of the warpgroup
    arrives on block r's barrier). `note`: a comment after the statement."""
    test = "" if first == "" else f"{first or kt} > 0 && "
    if peers > 1:
        return f"{indent}if ({test}(tid & 127) < {peers}) mbar_arrive_cluster(empty + ({kt} - 1) % {S}, tid & 127);{note}\n"
    return f"{indent}if ({test}(tid & 127) == 0) mbar_arrive(empty + ({kt} - 1) % {S});{note}\n"


def fold_of(KT: int, fold: int) -> int:
    """The k-tiles of a fold for KT tiles (3xTF32 on planes): at most `fold`, wasting the fewest zero tiles
    past K (the loop runs whole folds), the longest among those; at least 2 where KT allows (a fold of one
    waits for every step's MMAs)."""
    top = max(1, min(fold, KT))
    return min(range(top, min(2, top) - 1, -1), key=lambda f: -(-KT // f) * f)


SWIZZLE_PAD = 1024  # dynamic shared bytes more for a swizzled ring that aligns itself (smem_base)


def smem_base(swz: bool) -> str:
    """The kernel's dynamic shared memory as `smem`. Swizzled tiles must start on 1024-byte boundaries (the hardware
    XORs address bits 4-6 with 7-9, the loaders XOR with the row within the tile), yet a kernel that also declares
    static shared memory gets its dynamic memory where the driver puts it, after the static, whatever `__align__`
    says (RegNet's conv_stats conv, 6660 static bytes, read misplaced pieces on the H100: NaN at random); so the
    swizzled ring moves itself to the next boundary, SWIZZLE_PAD more bytes asked at launch."""
    if not swz:
        return "    extern __shared__ __align__(128) unsigned char smem[];"
    return ("    extern __shared__ __align__(1024) unsigned char smem_raw[];\n"
            "    unsigned char* smem = smem_raw + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw) & 1023u)) & 1023u);")


def kernel_source_wgmma(name: str, args: str, k: GemmKnobs, A: Operand, B: Operand, M: int, N: int, K: int,
                        setup: str, store: str, a_loader=None, b_loader=None, tiles: str | None = None,
                        b_lo: int = 0, epilogue: str | None = None, kt: str | None = None) -> str:
    """kernel_source's contract (setup, loaders, store with `acc[mi][ni][2 * h + e]` at row m, column n)
    on `wgmma.m64nNk8.tf32`: BM / 64 warpgroups, each 64 rows by all BN columns; both tiles in the
    canonical no-swizzle layout (Operand.canon), so the tensor cores read them straight from shared
    memory. Plain TF32, or with k.planes 3xTF32 on operands split into TF32 high and low planes in memory
    (the convolution's staging): a ring slot holds both planes of both tiles (the a_loader copies A's two,
    the low one A.elems after the high one; B's low plane lies `b_lo` floats after its high one), three
    MMAs a k-step into a per-fold sum as the planes GEMM does (render_planes), K run in whole folds
    (pieces past K zero-filled). `epilogue`: the kernel's end after the MMAs in place of the per-element
    `store` (conv_rows: reductions over the tile's columns)."""
    if not (A.canon and B.canon) or BK != 32:
        raise Unsupported("wgmma reads canonical k-contiguous tiles")
    if k.BM % 64 or k.BM > 256 or k.BN not in (32, *WGMMA_NS) or k.stages < 3:
        raise Unsupported("wgmma tile shape (and a ring of 3 stages or more: one step's MMAs stay in flight)")
    if k.planes and (a_loader is None or b_loader is not None or not b_lo):
        raise Unsupported("the planes ring takes a gather of A's two planes and B's low plane's offset")
    T, S, NI = k.threads(True), k.stages, k.BN // 8
    P = 2 if k.planes else 1
    EA, EB = P * A.elems, P * B.elems

    if A.swz != B.swz:
        raise Unsupported("both tiles swizzled or neither")
    fa, fb = a_loader is None and A.fast(T), b_loader is None and B.fast(T)

    def load(slot: str) -> str:
        sa, sb = f"As + ({slot}) * {EA}", f"Bs + ({slot}) * {EB}"
        a = (a_loader(sa) if a_loader else A.fast_loader(T, sa, "Ab", "fa_") if fa else A.loader(T, sa, "Ab", "m0"))
        b = (b_loader(sb) if b_loader else B.fast_loader(T, sb, "Bb", "fb_") if fb else B.loader(T, sb, "Bb", "n0"))
        if k.planes:
            sl = f"{sb} + {B.elems}"
            b += "\n" + (B.fast_loader(T, sl, "Bb", "fb_", b_lo) if fb else B.loader(T, sl, f"(Bb + {b_lo}LL)", "n0"))
        return a + "\n" + b
    fast = (A.fast_setup(T, "Ab", "m0", "fa_") if fa else "") + (B.fast_setup(T, "Bb", "n0", "fb_") if fb else "")
    KT = -(-K // BK)
    F = fold_of(KT, k.fold) if k.planes else 1
    # The ring (wg_ring) keeps one step's MMAs in flight (wait_group 1) while the next step waits for its
    # tile. A landed tile is made visible to the tensor cores' async proxy by each copying thread
    # (fence.proxy.async) before the barrier.
    # `kt`: the block's k-tiles where fewer than K's (setup defines what it reads), in whole folds on planes
    kt = kt and (f"(({kt}) + {F - 1}) / {F} * {F}" if k.planes else kt)
    head, wait, top, bottom = wg_ring(-(-KT // F) * F * BK if k.planes else K, S, load, k.lead, kt=kt)
    init = fold_acc(NI) if k.planes else (f"""    float acc[1][{NI}][4];
    #pragma unroll
    for (int ni = 0; ni < {NI}; ++ni)
        #pragma unroll
        for (int q = 0; q < 4; ++q) acc[0][ni][q] = 0.0f;""")
    head = f"""{smem_base(A.swz)}
    float* As = reinterpret_cast<float*>(smem);
    float* Bs = As + {S} * {EA};
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wg = tid >> 7, wq = (tid >> 5) & 3;  // warpgroup: 64 rows of the tile; warp in it: 16 of those
{tiles or _xyz_tiles(k, note=False)}
{setup}
{init}
{fast}{head}"""
    pre = f"{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{WGMMA_N32 if k.BN == 32 else ''}"
    if not k.planes:
        return f"""{pre}
extern "C" __global__ void __launch_bounds__({T}) {name}({args}) {{
{head}    for (int kt = 0; kt < KT; ++kt) {{
        cp_async_wait<{wait}>();
        fence_proxy_async();
        __syncthreads();
{top}        {{
            const float* As_s = As + (kt % {S}) * {A.elems} + wg * {64 * BK};
            const float* Bs_s = Bs + (kt % {S}) * {B.elems};
            wgmma_fence();
            #pragma unroll
            for (int kk = 0; kk < {BK}; kk += 8)
                wgmma_tf32_n{k.BN}(&acc[0][0][0], {A.desc("As_s", "kk")}, {B.desc("Bs_s", "kk")});
            wgmma_commit();
            wgmma_wait1();
        }}
{bottom}    }}
    wgmma_wait0();
{epilogue or _wg_store(NI, M, N, store, "wg * 64 + wq * 16")}"""
    steps = plane_products(k.BN, range(0, BK, 8), lambda x, kk: A.desc(f"sA{x}_s", kk), lambda x, kk: B.desc(f"sB{x}_s", kk))
    tiles = f"""            const float* sAh_s = As + (kt % {S}) * {EA} + wg * {64 * BK};
            const float* sAl_s = sAh_s + {A.elems};
            const float* sBh_s = Bs + (kt % {S}) * {EB};
            const float* sBl_s = sBh_s + {B.elems};
"""
    return f"""{pre}
extern "C" __global__ void __launch_bounds__({T}) {name}({args}) {{
{head}{fold_loop(F, NI, k.lead, wait, top, bottom, tiles, steps)}{epilogue or _wg_store(NI, M, N, store, "wg * 64 + wq * 16")}"""


def fold_acc(NI: int) -> str:
    """The planes kernels' accumulators: the total `acc` (as the stores read it) and the fold's `part`, zeroed."""
    return f"""    float acc[1][{NI}][4], part[{NI * 4}];
    #pragma unroll
    for (int q = 0; q < {NI * 4}; ++q) {{ acc[0][q / 4][q % 4] = 0.0f; part[q] = 0.0f; }}"""


def plane_products(BN: int, ks, a_desc, b_desc) -> str:
    """A k-tile's 3xTF32 MMAs on plane tiles into `part`: per k-step `ks` (floats) the two cross terms, small
    first (low A by high B, high A by low B), then high by high; `a_desc(plane, k)`, `b_desc(plane, k)` give a
    plane's ("h" or "l") descriptor."""
    return "\n".join(f"            wgmma_tf32_n{BN}(part, {a_desc(a, kk)}, {b_desc(b, kk)});"
                     for kk in ks for a, b in (("l", "h"), ("h", "l"), ("h", "h")))


def fold_loop(F: int, NI: int, lead: bool, wait: str, top: str, bottom: str, tiles: str, steps: str) -> str:
    """3xTF32 on planes: the cp.async ring's k-loop (wg_ring's wait, refills) a fold of F k-tiles at a time, each
    step's MMAs (`steps`, on the tiles `tiles` names) into `part`, added to `acc` once the fold's are done."""
    return f"""    // a fold of F k-tiles at a time, unrolled: `part` is never copied between branches while MMAs that
    // write it are in flight (a data-dependent fold made ptxas wait for every step's MMAs: C7517)
    for (int kg = 0; kg < KT; kg += {F}) {{
        #pragma unroll
        for (int f = 0; f < {F}; ++f) {{
            const int kt = kg + f;
            cp_async_wait<{wait}>();
            fence_proxy_async();
            __syncthreads();
{top}{tiles}            wgmma_fence();
{steps}
            wgmma_commit();
            {"" if lead else f"if (f < {F - 1}) "}wgmma_wait1();
{bottom}        }}
        wgmma_wait0();  // this fold's k-tiles done: into the total
        #pragma unroll
        for (int q = 0; q < {NI * 4}; ++q) {{ acc[0][q / 4][q % 4] += part[q]; part[q] = 0.0f; }}
    }}
"""


def kernel_source_wgmma3(name: str, args: str, k: GemmKnobs, A: Operand, B: Operand, M: int, N: int, K: int,
                         setup: str, store: str) -> str:
    """3xTF32 on the warpgroup MMA, any operand layout: tiles arrive raw (kernel_source's ring); each
    k-tile B is split once into canonical high and low planes (transposed to K-major on the way) that
    the tensor cores read, and each warp's A fragments are read and split in registers (the MMA takes A
    from registers). Three MMAs a step, small terms first, into a per-k-tile sum (the module's note)."""
    if BK != 32 or k.BM % 64 or k.BM > 256 or k.BN not in WGMMA_NS or k.stages < 2:
        raise Unsupported("wgmma tile shape")
    T, S, NI = k.threads(True), k.stages, k.BN // 8
    P = Operand("P", k.BN, N, K, True, 4, True)  # the canonical planes' addressing

    def load(slot: str) -> str:
        return (A.loader(T, f"As + ({slot}) * {A.elems}", "Ab", "m0") + "\n"
                + B.loader(T, f"Bs + ({slot}) * {B.elems}", "Bb", "n0"))
    a_frag = "\n".join(f"                split_tf32(As_s[{A.at(f'rb + g + {8 * (q % 2)}', f'ks * 8 + t + {4 * (q // 2)}')}], "
                        f"ah[ks][{q}], al[ks][{q}]);" for q in range(4))
    return f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}
extern "C" __global__ void __launch_bounds__({T}) {name}({args}) {{
    extern __shared__ __align__(128) unsigned char smem[];
    float* As = reinterpret_cast<float*>(smem);
    float* Bs = As + {S} * {A.elems};
    float* Bh = Bs + {S} * {B.elems};  // this k-tile's B, split: high and low TF32 planes, K-major canonical
    float* Bl = Bh + {k.BN * BK};
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wg = tid >> 7, wq = (tid >> 5) & 3;
    const int rb = wg * 64 + wq * 16;  // this warp's 16 rows of the tile
    const long long m0 = (long long)blockIdx.x * {k.BM}, n0 = (long long)blockIdx.y * {k.BN};
    const int bz = blockIdx.z;
{setup}
    float acc[1][{NI}][4], part[{NI * 4}];
    #pragma unroll
    for (int ni = 0; ni < {NI}; ++ni)
        #pragma unroll
        for (int q = 0; q < 4; ++q) acc[0][ni][q] = 0.0f;
{_ring_head(K, S, load)}    for (int kt = 0; kt < KT; ++kt) {{
        cp_async_wait<{S - 2}>();
        __syncthreads();
{_ring_refill(S, load)}        const float* As_s = As + (kt % {S}) * {A.elems};
        const float* Bs_s = Bs + (kt % {S}) * {B.elems};
        for (int c = tid; c < {k.BN * BK}; c += {T}) {{  // B: split once a tile, for both warpgroups
            const int r = c / {BK}, kq = c % {BK};
            unsigned hi, lo;
            split_tf32(Bs_s[{B.at('r', 'kq')}], hi, lo);
            Bh[{P.at('r', 'kq')}] = __uint_as_float(hi);
            Bl[{P.at('r', 'kq')}] = __uint_as_float(lo);
        }}
        unsigned ah[{BK // 8}][4], al[{BK // 8}][4];
        #pragma unroll
        for (int ks = 0; ks < {BK // 8}; ++ks) {{
{a_frag}
        }}
        #pragma unroll
        for (int q = 0; q < {NI * 4}; ++q) part[q] = 0.0f;
        fence_proxy_async();
        __syncthreads();
        wgmma_fence();
        #pragma unroll
        for (int ks = 0; ks < {BK // 8}; ++ks) {{
            wgmma_tf32_rs_n{k.BN}(part, al[ks], wg_desc(Bh + ks * 64));  // small terms first
            wgmma_tf32_rs_n{k.BN}(part, ah[ks], wg_desc(Bl + ks * 64));
            wgmma_tf32_rs_n{k.BN}(part, ah[ks], wg_desc(Bh + ks * 64));
        }}
        wgmma_commit();
        wgmma_wait0();
        #pragma unroll
        for (int ni = 0; ni < {NI}; ++ni)
            #pragma unroll
            for (int q = 0; q < 4; ++q) acc[0][ni][q] += part[ni * 4 + q];
    }}
{_wg_store(NI, M, N, store, "rb")}"""


def shared_bytes_wgmma3(p: GemmPlan, k: GemmKnobs) -> int:
    return shared_bytes(p, k) + 2 * k.BN * BK * 4


# -- 3xTF32 on the warpgroup MMA from planes split once in memory ---------------------------------------------
# The register-split kernel above re-splits B every k-tile behind two barriers and waits for its MMAs each
# step (3.18-3.88 ms against mma.sync's 2.61 at 4096^3 on the H200). Here a first kernel splits each
# operand once into TF32 high and low planes, K-major and padded to whole tiles (A (Mp, Kp), B (Np, Kp);
# B transposed through shared memory where it is (K, N)), so the GEMM kernel is plain TF32 wgmma on four
# canonical tiles, three MMAs a k-step (lo*hi, hi*lo, hi*hi) with no split, no bounds checks and one
# step's MMAs in flight. Each `fold` k-tiles are summed in their own accumulator (the module's note on
# the MMA's accumulation), then added to the total. The split costs one read of A and B and two writes.
SPLIT_BLOCK = 256
GROUP_M = 8  # the planes GEMM's row tiles a group (a wave's tiles then share their planes in L2)


def padded(p: GemmPlan, k: GemmKnobs) -> tuple[int, int, int]:
    """(Mp, Np, Kp): the planes' rows and K, whole tiles; K in whole folds too (the GEMM's k-loop runs
    fold by fold with no test on the last tile: zeros past K add nothing)."""
    kq = math.lcm(32, k.BK * k.fold)
    return -(-p.M // k.BM) * k.BM, -(-p.N // k.BN) * k.BN, -(-p.K // kq) * kq


def plane_batches(p: GemmPlan, k: GemmKnobs | None = None) -> tuple[int, int]:
    """How many A and B operands the planes hold: the batch's where that operand is batched, else one;
    no B where B is split in the ring (`bsplit`)."""
    return (p.batch if p.a_batched else 1), (0 if k is not None and k.bsplit else p.batch if p.b_batched else 1)


def bsplit_ok(p: GemmPlan) -> bool:
    """B can be read raw into the ring's canonical tiles: K-contiguous ((N, K), an nn.Linear weight) in
    16-byte pieces."""
    return p.b_layout == "nk" and p.K % 4 == 0


def planes_check(p: GemmPlan, k: GemmKnobs) -> None:
    if k.splitk != 1:
        raise Unsupported("the split planes are for whole-K GEMMs (no split-K)")
    if p.batch > 65535:
        raise Unsupported("more than 65535 batches")
    if k.swz and k.BK != 32:
        raise Unsupported("the 128-byte swizzle holds a tile row of K 32")
    if k.BK not in (16, 32) or k.BM % 64 or k.BM > 256 or k.BN not in WGMMA_NS or k.stages < 3 or k.fold < 1:
        raise Unsupported("wgmma tile shape (K 16 or 32; a ring of 3 stages or more: one step's MMAs stay in flight)")
    if k.bsplit and not bsplit_ok(p):
        raise Unsupported("B split in the ring needs B K-contiguous in 16-byte pieces ((N, K), K a multiple of 4)")
    if k.tma and (not k.swz or k.bsplit or k.BM not in (64, 128) or k.BN > 128):
        raise Unsupported("the TMA planes GEMM reads swizzled planes of both operands (no bsplit), one or two "
                          "consumer warpgroups, at most 128 columns (two accumulators a thread)")


def planes_node(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> Node:
    """The planes' workspace: A's high, A's low, B's high, B's low, flat (each its operands of the batch)."""
    Mp, Np, Kp = padded(p, k)
    ba, bb = plane_batches(p, k)
    return Node(f"{p.gemm.name}_planes", "input", shape=(2 * (ba * Mp + bb * Np) * Kp,), dtype="float32")


def split_grid(p: GemmPlan, k: GemmKnobs) -> tuple[int, int]:
    """A 32x32 tile of A or B (not with `bsplit`) a block on x, the batch on y."""
    Mp, Np, Kp = padded(p, k)
    return ((Mp // 32 + (0 if k.bsplit else Np // 32)) * (Kp // 32), max(plane_batches(p, k)))


def entry_base(ptr: str, size: int, batched: bool) -> str:
    """Batch entry bz's operand: `ptr` advanced by bz blocks of `size` elements where the operand holds one
    an entry (a broadcast operand is its own only block)."""
    return f"({ptr} + (long long)bz * {size}LL)" if batched else ptr


def workspace_bases(regions: list[tuple[str, int, int]], K: int, bz: str) -> dict[str, str]:
    """Pointers into a workspace P of regions laid end to end, (name, rows, batches) each: `batches`
    blocks of rows x K (floats, or words of two 16-bit elements); the batch entry `bz`'s block where the
    region holds one an entry, else its only one."""
    out, at = {}, 0
    for name, rows, n in regions:
        off = f" + (long long)({bz}) * {rows * K}LL" if n > 1 else ""
        out[name] = f"(P + {at}LL{off})" if at else f"(P{off})"
        at += n * rows * K
    return out


def _plane_bases(p: GemmPlan, k: GemmKnobs, bz: str) -> dict[str, str]:
    """The batch entry `bz`'s four planes in the workspace P."""
    Mp, Np, Kp = padded(p, k)
    ba, bb = plane_batches(p, k)
    return workspace_bases([("Ah", Mp, ba), ("Al", Mp, ba), ("Bh", Np, bb), ("Bl", Np, bb)], Kp, bz)


def whole_tile_loads(ops: dict[str, Operand], bases: dict[str, str], T: int):
    """(load(slot), setup): a stage of the ring copying whole canonical tiles of the operands (A's rows
    from m0, B's from n0) into `s<name> + slot * elems`, and what runs before the ring. Where a thread's
    pieces are whole passes apart, one pointer an operand and constant steps with no bounds test (the
    generic loader's integer work, 1744 IMAD and 1309 ISETP in the SASS of an unrolled fold of the planes
    GEMM, had outweighed the MMAs on the H200)."""
    fast = all(o.fast(T) for o in ops.values())
    r0 = {n: "m0" if n[0] == "A" else "n0" for n in ops}

    def load(slot: str) -> str:
        return "\n".join(o.fast_loader(T, f"s{n} + ({slot}) * {o.elems}", bases[n], f"{n}_") if fast else
                         o.loader(T, f"s{n} + ({slot}) * {o.elems}", bases[n], r0[n]) for n, o in ops.items())
    return load, "".join(o.fast_setup(T, bases[n], r0[n], f"{n}_") for n, o in ops.items()) if fast else ""


def output_store(g: OpGraph, p: GemmPlan) -> tuple[str, str, str]:
    """(epilogue statements, its value, the store): the fused epilogue of the accumulator
    `acc[mi][ni][2 * h + e]` at row m, column n of batch entry bz, stored in the output's dtype."""
    M, N = p.M, p.N
    epi, v = epilogue(g, p, "acc[mi][ni][2 * h + e]", f"(((long long)bz * {M}LL + m) * {N}LL + n)", "                    ")
    return epi, v, f"{epi}\n                    out[((long long)bz * {M}LL + m) * {N}LL + n] = from_f<{CTYPE[g.output.dtype]}>({v});"


def shared_bytes_planes(p: GemmPlan, k: GemmKnobs) -> int:
    """The ring of four tiles a stage (and with `tma` its two barriers a stage)."""
    return k.stages * 2 * (k.BM + k.BN) * k.BK * 4 + (tma_barrier_bytes(k.stages) if k.tma else 0)


def planes_maps(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> list:
    """`tma`: the maps of A's and B's planes in the workspace, (K, rows, high and low planes of each batch
    entry) each, boxes of 32 floats x BM (BN) x 1: a plane's tile at z = entry (high) or planes + entry (low)."""
    from agents.expert import host
    Mp, Np, Kp = padded(p, k)
    ba, bb = plane_batches(p, k)
    P = planes_node(g, p, k)
    return [host.TensorMap(P, (Kp, Mp, 2 * ba), (32, k.BM, 1), 0, 4),
            host.TensorMap(P, (Kp, Np, 2 * bb), (32, k.BN, 1), 2 * ba * Mp * Kp, 4)]


def _split_source(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """`egg_gemm_split`: a 32x32 tile of A or B a block, read along its contiguous dim into shared memory,
    written K-major as its TF32 high part (rounded) and low part (the rest, rounded); zeros past the edges."""
    Mp, Np, Kp = padded(p, k)
    args = kernel_args(g, p).split(", ", 1)

    def tile(src: str, R: int, kcontig: bool, hi: str, lo: str) -> str:
        if kcontig:
            load = (f"const long long r = r0 + ty + 8 * j, kk = k0 + tx;\n"
                    f"                s[ty + 8 * j][tx] = (r < {R} && kk < {p.K}) ? {src}[r * {p.K}LL + kk] : 0.0f;")
        else:
            load = (f"const long long kk = k0 + ty + 8 * j, r = r0 + tx;\n"
                    f"                s[tx][ty + 8 * j] = (r < {R} && kk < {p.K}) ? {src}[kk * {R}LL + r] : 0.0f;")
        return f"""            #pragma unroll
            for (int j = 0; j < 4; ++j) {{
                {load}
            }}
            __syncthreads();
            #pragma unroll
            for (int j = 0; j < 4; ++j) {{
                const long long r = r0 + ty + 8 * j, kk = k0 + tx;
                const float v = s[ty + 8 * j][tx];
                const float h = __uint_as_float(round_tf32(v));
                {hi}[r * {Kp}LL + kk] = h;
                {lo}[r * {Kp}LL + kk] = __uint_as_float(round_tf32(v - h));
            }}"""
    ta = (Mp // 32) * (Kp // 32)
    ba, bb = plane_batches(p, k)
    pl = _plane_bases(p, k, "bz")
    a, b = entry_base("A", p.M * p.K, ba > 1), entry_base("B", p.K * p.N, bb > 1)
    b_tiles = "" if k.bsplit else f"""\n    }} else {{
        if (bz >= {bb}) return;
        b -= {ta}LL;
        const long long r0 = (b / {Kp // 32}) * 32, k0 = (b % {Kp // 32}) * 32;
{tile(b, p.N, p.b_layout == "nk", pl["Bh"], pl["Bl"])}"""
    return f"""
extern "C" __global__ void __launch_bounds__({SPLIT_BLOCK}) egg_gemm_split(float* __restrict__ P, {args[1]}) {{
    __shared__ float s[32][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, bz = blockIdx.y;
    (void)bz;
    long long b = blockIdx.x;
    if (b < {ta}LL) {{
        if (bz >= {ba}) return;  // an operand shared by the batch: split once
        const long long r0 = (b / {Kp // 32}) * 32, k0 = (b % {Kp // 32}) * 32;
{tile(a, p.M, p.a_layout == "mk", pl["Ah"], pl["Al"])}{b_tiles}
    }}
}}
"""


def grouped_tile(mt: int, nt: int, k: GemmKnobs) -> str:
    """A warpgroup GEMM's thread indices and its block's output tile (m0, n0; the batch entry bz): blocks
    walk the output in groups of GROUP_M row tiles, the group's column tiles in turn, so a wave's tiles
    share their operands' tiles in L2."""
    return WG_THREAD + tile_coords(mt, nt, k, f"blockIdx.y * {mt} + blockIdx.x", "blockIdx.z")


# a warpgroup kernel's thread indices: lane, its fragment row g and column pair t, warpgroup, warp in it
WG_THREAD = """    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wg = tid >> 7, wq = (tid >> 5) & 3;  // warpgroup: 64 rows of the tile; warp in it: 16 of those
"""


def tile_coords(mt: int, nt: int, k: GemmKnobs, id_: str, bz: str, ind: str = "    ") -> str:
    """The output tile (m0, n0) of tile `id_` of batch entry `bz` in grouped order (grouped_tile)."""
    return f"""{ind}const int id = {id_}, gm = id / {GROUP_M * nt}, first = gm * {GROUP_M};
{ind}const int rows_in = min({mt} - first, {GROUP_M}), in = id % {GROUP_M * nt};
{ind}const long long m0 = (long long)(first + in % rows_in) * {k.BM}, n0 = (long long)(in / rows_in) * {k.BN};
{ind}const int bz = {bz};
{ind}(void)bz;
"""


def _ring_split(EB: int, T: int) -> str:
    """`bsplit`: this k-tile's raw B split where it lies, the high part over it and the low part at the same
    offset of the low ring (the swizzle moves both alike), then made visible to the tensor cores; the step
    before's MMAs, still in flight, read the other slots."""
    n = -(-EB // (4 * T))
    guard = f"\n                if (i >= {EB // 4}) break;" if EB % (4 * T) else ""
    return f"""            #pragma unroll
            for (int j = 0; j < {n}; ++j) {{
                const int i = tid + j * {T};{guard}
                float4* hp = reinterpret_cast<float4*>(sBh + sl * {EB}) + i;
                const float4 v = *hp;
                float4 h, l;
                h.x = __uint_as_float(round_tf32(v.x)); l.x = __uint_as_float(round_tf32(v.x - h.x));
                h.y = __uint_as_float(round_tf32(v.y)); l.y = __uint_as_float(round_tf32(v.y - h.y));
                h.z = __uint_as_float(round_tf32(v.z)); l.z = __uint_as_float(round_tf32(v.z - h.z));
                h.w = __uint_as_float(round_tf32(v.w)); l.w = __uint_as_float(round_tf32(v.w - h.w));
                *hp = h;
                reinterpret_cast<float4*>(sBl + sl * {EB})[i] = l;
            }}
            fence_proxy_async();
            __syncthreads();
"""


def _plane_tiles(p: GemmPlan, k: GemmKnobs) -> tuple[dict[str, Operand], str]:
    """The four plane tiles of a stage (A's and B's high and low) and a k-tile's MMAs on them: per k-step
    the two cross terms, then high by high, into `part`."""
    Mp, Np, Kp = padded(p, k)
    ops = {n: Operand(n, rows, tot, Kp, True, 4, True, k.BK, k.swz) for n, rows, tot in
           (("Ah", k.BM, Mp), ("Al", k.BM, Mp), ("Bh", k.BN, Np), ("Bl", k.BN, Np))}
    return ops, plane_products(k.BN, range(0, k.BK, 8), lambda x, kk: ops[f"A{x}"].desc(f"sA{x}_s", kk),
                               lambda x, kk: ops[f"B{x}"].desc(f"sB{x}_s", kk))


def render_planes(g: OpGraph, p: GemmPlan, k: GemmKnobs, store: str) -> str:
    """The split kernel, then `egg_gemm(out, P, <the GEMM's arguments>)` on the planes. Tiles of K = k.BK
    (16: twice the ring's stages in the same shared memory, so the copies run further ahead of the MMAs);
    blocks walk the output in groups of GROUP_M row tiles, so a wave's tiles share their planes in L2."""
    planes_check(p, k)
    if k.tma:
        return _render_planes_tma(g, p, k)
    Mp, Np, Kp = padded(p, k)
    T, S, NI, F, bk = k.threads(True), k.stages, k.BN // 8, k.fold, k.BK
    EA, EB = k.BM * bk, k.BN * bk
    ops, steps = _plane_tiles(p, k)
    copied, bases = dict(ops), _plane_bases(p, k, "bz")
    if k.bsplit:  # B's raw tiles into the high plane's ring (bounds tested: B is not padded), split there
        del copied["Bl"]
        copied["Bh"] = Operand("Bh", k.BN, p.N, p.K, True, 4, True, bk, k.swz, tail=Kp > p.K)
        bases["Bh"] = entry_base("B", p.N * p.K, p.b_batched)
    load, fast_head = whole_tile_loads(copied, bases, T)  # the planes are whole tiles
    args = kernel_args(g, p).split(", ", 1)
    mt, nt = Mp // k.BM, Np // k.BN
    head, wait, top, bottom = wg_ring(Kp, S, load, k.lead, bk)
    tiles = f"""            const int sl = kt % {S};
            const float* sAh_s = sAh + sl * {EA} + wg * {64 * bk};
            const float* sAl_s = sAl + sl * {EA} + wg * {64 * bk};
            const float* sBh_s = sBh + sl * {EB};
            const float* sBl_s = sBl + sl * {EB};
{_ring_split(EB, T) if k.bsplit else ""}"""
    return f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{_split_source(g, p, k)}
extern "C" __global__ void __launch_bounds__({T}) egg_gemm({args[0]}, const float* __restrict__ P, {args[1]}) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sAh = reinterpret_cast<float*>(smem);
    float* sAl = sAh + {S * EA};
    float* sBh = sAl + {S * EA};
    float* sBl = sBh + {S * EB};
{grouped_tile(mt, nt, k)}{fold_acc(NI)}
{fast_head}{head}{fold_loop(F, NI, k.lead, wait, top, bottom, tiles, steps)}{_wg_store(NI, p.M, p.N, store, "wg * 64 + wq * 16")}"""


def _render_planes_tma(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """The split kernel, then `egg_gemm(mA, mB, <the GEMM's arguments>)` warp-specialised on the planes: a
    producer warpgroup copies a k-tile's four swizzled tiles (A's and B's high and low planes) by TMA into a
    ring slot (the 16-bit GEMM's ring: tma_setup, tma_producer); the consumers sum folds of F k-tiles as
    render_planes does, releasing a slot once the MMAs that read it are done."""
    Mp, Np, Kp = padded(p, k)
    S, NI, F, bk, NW = k.stages, k.BN // 8, k.fold, k.BK, k.BM // 64
    T = k.threads(True)
    EA, EB = k.BM * bk, k.BN * bk
    ba, bb = plane_batches(p, k)
    za, zb = ("bz" if ba > 1 else "0"), ("bz" if bb > 1 else "0")
    steps = _plane_tiles(p, k)[1]
    mt, nt = Mp // k.BM, Np // k.BN
    loads = [f"tma_load(sAh + s * {EA}, &mA, kt * {bk}, (int)m0, {za}, full + s);",
             f"tma_load(sAl + s * {EA}, &mA, kt * {bk}, (int)m0, {ba} + {za}, full + s);",
             f"tma_load(sBh + s * {EB}, &mB, kt * {bk}, (int)n0, {zb}, full + s);",
             f"tma_load(sBl + s * {EB}, &mB, kt * {bk}, (int)n0, {bb} + {zb}, full + s);"]
    producer = tma_producer(S, NW, Kp // bk, 2 * (k.BM + k.BN) * bk * 4, loads)
    return f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{TMA_PRELUDE}{PAIR_PRELUDE}{_split_source(g, p, k)}
extern "C" __global__ void __launch_bounds__({T}, 1) egg_gemm(const __grid_constant__ EggTmap mA, const __grid_constant__ EggTmap mB, {kernel_args(g, p)}) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sAh = reinterpret_cast<float*>(smem);
    float* sAl = sAh + {S * EA};
    float* sBh = sAl + {S * EA};
    float* sBl = sBh + {S * EB};
{grouped_tile(mt, nt, k)}{tma_setup(S, NW, f"sBl + {S * EB}")}{producer}{fold_acc(NI)}
    // a fold of F k-tiles at a time, unrolled (render_planes: no copy of `part` while MMAs write it)
    for (int kg = 0; kg < {Kp // bk}; kg += {F}) {{
        #pragma unroll
        for (int f = 0; f < {F}; ++f) {{
            const int kt = kg + f, s = kt % {S};
            mbar_wait(full + s, (kt / {S}) & 1);
            const float* sAh_s = sAh + s * {EA} + wg * {64 * bk};
            const float* sAl_s = sAl + s * {EA} + wg * {64 * bk};
            const float* sBh_s = sBh + s * {EB};
            const float* sBl_s = sBl + s * {EB};
            wgmma_fence();
{steps}
            wgmma_commit();
            if (f < {F - 1}) {{
                wgmma_wait1();
{tma_consumer_release(S, "kt", "                ")}            }}
        }}
        wgmma_wait0();  // this fold's k-tiles done: into the total
{tma_consumer_release(S, f"(kg + {F - 1})", "        ")}        #pragma unroll
        for (int q = 0; q < {NI * 4}; ++q) {{ acc[0][q / 4][q % 4] += part[q]; part[q] = 0.0f; }}
    }}
{pair_store(g, p, NI, "wg * 64 + wq * 16")}}}
"""
