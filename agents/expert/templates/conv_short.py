"""A forward convolution of short K (a group's (tap, channel) columns, e.g. 3x3 taps of 8 channels: 72)
as an implicit GEMM on mma.sync whose whole K sits in shared memory: knob `whole`.

Why: the ring of conv.py runs over K in tiles of 32, so at K 72 a block copies three tiles, waits for
them, computes and stores: a block's load latency is hidden only by the other block on its SM (two
fit: 83 KB of ring, 124 registers), and the output's store waits for nothing else. Here a block holds
the group's weight (BN x K) once and walks pixel tiles (persistent: as many blocks as fit the GPU), with
two A buffers: the gather of tile i + 2 is issued once tile i's MMAs have read their buffer, so it runs
under tile i's epilogue (the stores, which dominate at K 72: 64 output channels a pixel against 72 MACs)
and tile i + 1's MMAs.

Layout: the input and weight staged channels last by conv.py's staging kernels (a group's channels
a multiple of 4: 16-byte pieces). A thread copies one 16-byte piece of a tap for its pixel row, taps
in turn; lanes next to each other take the pieces of one (pixel, tap) and then the next pixel's, so a
warp reads whole sectors. K is padded to a multiple of 8 (the MMA's k) with zero columns written once."""
from __future__ import annotations

import math

from agents.expert.opgraph import OpGraph, Unsupported
from agents.expert.templates.conv import ConvPlan, _store, kernel_args
from agents.expert.templates.gemm import GemmKnobs
from agents.expert.templates.gemm_tf32 import TF32_PRELUDE, Operand, _fragment_store, _reads
from agents.expert.codegen import PRELUDE

SM_SHARED = 228 * 1024  # an SM's shared memory (H100/H200), 1 KB of it reserved per block


def kp(p: ConvPlan) -> int:
    """K padded to the MMA's k (8)."""
    return -(-p.Kg // 8) * 8


def ld(p: ConvPlan) -> int:
    """A tile row's pitch in floats: K + 4, so a fragment's 8 rows x 4 columns hit 32 banks."""
    return kp(p) + 4


def shared_bytes(p: ConvPlan, k: GemmKnobs) -> int:
    """Two A buffers (BM rows) and the weight (BN rows), whole K each."""
    return (2 * k.BM + k.BN) * ld(p) * 4


def ok(p: ConvPlan) -> str | None:
    """Why the template does not apply (None: it does)."""
    if p.transposed:
        return "a transposed conv (its phases gather backwards)"
    if p.Cg % 4:
        return "a group's channels not a multiple of 4 (16-byte pieces of the channels-last input)"
    if math.prod(p.in_sp) * p.C >= 2 ** 31 or p.M >= 2 ** 31:
        return "an image or the output's pixels past 32-bit offsets"
    return None


def blocks_per_sm(p: ConvPlan, k: GemmKnobs) -> int:
    """Blocks an SM holds by shared memory, at most 2 (the 3xTF32 tile's registers: 256 threads at up to 128)."""
    return max(1, min(2, SM_SHARED // (shared_bytes(p, k) + 1024)))


def grid(p: ConvPlan, k: GemmKnobs, sms: int) -> tuple[int, int, int]:
    """Persistent: pixel tiles walked by at most the blocks that fit the GPU at once, channel tiles on y,
    groups on z."""
    mt, nt = -(-p.M // k.BM), -(-p.OCg // k.BN)
    if nt > 65535 or p.groups > 65535:
        raise Unsupported("more than 65535 channel tiles or groups")
    return (max(1, min(mt, blocks_per_sm(p, k) * sms // max(1, nt * p.groups))), nt, p.groups)


def _row_decode(p: ConvPlan, mv: str, ind: str, tag: str) -> list[str]:
    """Pixel `mv` (GEMM row, unsigned) -> its image `{tag}img` and window origin `{tag}o{d}` per dim."""
    lines = [f"{ind}unsigned {tag}rest = {mv};"]
    for d in reversed(range(p.nd)):
        lines.append(f"{ind}const int {tag}o{d} = (int)({tag}rest % {p.out_sp[d]}u) * {p.stride[d]} - {p.pad[d]}; "
                     f"{tag}rest /= {p.out_sp[d]}u;")
    lines.append(f"{ind}const int {tag}img = (int){tag}rest;")
    return lines


def _gather(p: ConvPlan, k: GemmKnobs, T: int, dst: str, tile: str) -> str:
    """Pixel tile `tile`'s A rows into `dst`. A tile is BM x Q (pixel, 16-byte piece of a tap) pairs, the piece
    fastest, so neighbouring lanes copy one pixel's tap contiguously and then the next pixel's. Where the pairs
    divide the block, each thread takes one pair and the taps of its slot (every TS-th); otherwise pair
    tid + u * T for each u, every tap. Out-of-window taps and rows past the output are zero-filled."""
    Q = p.Cg // 4
    taps = math.prod(p.ker)
    sp = [math.prod(p.in_sp[d + 1:]) for d in range(p.nd)]
    pairs = Q * k.BM
    if pairs <= T and T % pairs == 0:
        TS, idx, slot = T // pairs, ["tid % " + str(pairs)], f"tid / {pairs}"
    else:
        TS, idx, slot = 1, [f"tid + {u * T}" for u in range(-(-pairs // T))], "0"
    tail = "" if pairs % T == 0 or TS > 1 else f" && i_ < {pairs}"  # the last pass's threads past the pairs
    out = [f"        {{  // tile {tile}'s A",
           f"            const int ts_ = {slot}; (void)ts_;"]
    for i in idx:
        out.append("            {")
        out.append(f"            const int i_ = {i}, r_ = i_ / {Q}, q_ = i_ % {Q};")
        out.append(f"            const unsigned m_ = (unsigned)({tile}) * {k.BM}u + r_;")
        out.append(f"            const bool mok_ = m_ < {p.M}u{tail};")
        out += _row_decode(p, "mok_ ? m_ : 0u", "            ", "g")
        out.append(f"            const float* xb_ = X + (long long)gimg * {math.prod(p.in_sp) * p.C}LL + grp * {p.Cg} + q_ * 4;")
        out.append(f"            float* sd_ = {dst} + (i_ < {pairs} ? r_ : 0) * {ld(p)} + q_ * 4;")
        out.append("            #pragma unroll")
        out.append(f"            for (int j = 0; j < {-(-taps // TS)}; ++j) {{")
        out.append(f"                const int tp = {'ts_ + ' + str(TS) + ' * j' if TS > 1 else 'j'};")
        out.append(f"                if ({'tp < ' + str(taps) if taps % TS else 'true'}{tail}) {{")
        out.append("                    int r2_ = tp;")
        conds, offs = ["mok_"], []
        for d in reversed(range(p.nd)):
            out.append(f"                    const int q{d} = go{d} + (r2_ % {p.ker[d]}) * {p.dil[d]}; r2_ /= {p.ker[d]};")
            conds.append(f"q{d} >= 0 && q{d} < {p.in_sp[d]}")
            offs.append(f"q{d} * {sp[d]}" if sp[d] != 1 else f"q{d}")
        out.append(f"                    const bool ok = {' && '.join(conds)};")
        out.append(f"                    cp_async<16>(sd_ + tp * {p.Cg}, ok ? xb_ + ({' + '.join(offs)}) * {p.C} : X, ok ? 16 : 0);")
        out.append("                }")
        out.append("            }")
        out.append("            }")
    out.append("        }")
    return "\n".join(out)


def conv_value(p: ConvPlan) -> str:
    """The conv's value (its bias added) in register (mi, ni, h, e) of a warp's fragments, at channel `oc`."""
    a = "acc[mi][ni][2 * h + e]"
    return f"({a} + to_f({p.bias.name}[oc]))" if p.bias is not None else a


def column_pass(p: ConvPlan, MI: int, NI: int, TMW: int, TNW: int, sums: list[str], body: list[str], red: str) -> list[str]:
    """An epilogue's pass over a tile's columns (for render's `epilogue`): per column of this thread (`col` in the
    tile, channel `oc`) the `sums` start at 0, `body` runs for each of its rows inside the output (`m`, image `img`,
    output index `oi`), the 8 lanes of the column add theirs by shuffles, and lane g == 0 stores them to
    `red`[wm][i][col] (a warp row's partial sums, for the block to add in warp order after a barrier)."""
    osp = math.prod(p.out_sp)
    ind = " " * 28
    return ([f"        #pragma unroll\n        for (int ni = 0; ni < {NI}; ++ni)",
             "            #pragma unroll\n            for (int e = 0; e < 2; ++e) {",
             f"                const int col = wn * {TNW} + ni * 8 + 2 * t + e;",
             "                const long long oc = n0 + col;",
             "                float " + ", ".join(f"{x} = 0.0f" for x in sums) + ";",
             f"                #pragma unroll\n                for (int mi = 0; mi < {MI}; ++mi)",
             "                    #pragma unroll\n                    for (int h = 0; h < 2; ++h) {",
             f"                        const long long m = m0 + wm * {TMW} + mi * 16 + g + 8 * h;",
             f"                        if (m < {p.M}LL && oc < {p.OC}LL) {{",
             f"{ind}const long long img = m / {osp}LL, oi = (img * {p.OC}LL + oc) * {osp}LL + m % {osp}LL;",
             *(ind + ln for ln in body), "                        }", "                    }",
             "                #pragma unroll",
             "                for (int l = 4; l < 32; l <<= 1) {  // the column's 8 lanes",
             *(f"                    {x} += __shfl_xor_sync(0xffffffffu, {x}, l);" for x in sums), "                }",
             "                if (g == 0) { " + " ".join(f"{red}[wm][{i}][col] = {x};" for i, x in enumerate(sums)) + " }",
             "            }"])


def render(g: OpGraph, p: ConvPlan, k: GemmKnobs, split: int, args: str | None = None, epilogue=None) -> str:
    """`egg_conv(out, X staged, W staged, ...)`: a persistent block's walk over pixel tiles, the whole K a
    tile; `split` 3 is 3xTF32 (fp32 grade), 1 plain TF32 (the staged tensors hold TF32 values). `epilogue`
    (MI, NI, TMW, TNW) -> a tile's end in place of the per-element store (conv_pooled: the tile's sums), over
    `acc[mi][ni][2 * h + e]` at row m0 + wm * TMW + mi * 16 + g + 8h, column n0 + wn * TNW + ni * 8 + 2t + e;
    `args` the kernel's parameters where they differ."""
    if (why := ok(p)) is not None:
        raise Unsupported(f"the whole-K conv: {why}")
    if k.wgmma or k.planes or k.splitk > 1:
        raise Unsupported("the whole-K conv runs on mma.sync, unsplit")
    T = k.WM * k.WN * 32
    TMW, TNW = k.BM // k.WM, k.BN // k.WN
    MI, NI = TMW // 16, TNW // 8
    if MI < 1 or NI < 1 or TMW % 16 or TNW % 8:
        raise Unsupported("tensor-core tile shape")
    KP, LD, P = kp(p), ld(p), kp(p) // 4
    AEL = k.BM * LD
    mt = -(-p.M // k.BM)
    if split == 3:
        frags = f"unsigned ah[{MI}][4], al[{MI}][4], bh[{NI}][2], bl[{NI}][2];"
        mmas = ("mma_tf32(acc[mi][ni], al[mi], bh[ni]);  // small terms first\n"
                "                        mma_tf32(acc[mi][ni], ah[mi], bl[ni]);\n"
                "                        mma_tf32(acc[mi][ni], ah[mi], bh[ni]);")
    else:
        frags = f"unsigned ah[{MI}][4], bh[{NI}][2];"
        mmas = "mma_tf32(acc[mi][ni], ah[mi], bh[ni]);"
    # the ring's fragment reads on tiles of the whole K (pitch KP + 4); the staged tensors hold TF32 values at TF32
    a_reads, b_reads, _ = _reads(Operand("A", k.BM, p.M, KP, True, 4, bk=KP), Operand("B", k.BN, p.OCg, KP, True, 4, bk=KP),
                                 k, NI, split, rounded=True)
    pad = "" if KP == p.Kg else f"""
    for (int i = tid; i < {2 * k.BM}; i += {T})  // K's padding columns: zero in both A buffers, never copied over
        #pragma unroll
        for (int c = {p.Kg}; c < {KP}; ++c) As[(i / {k.BM}) * {AEL} + (i % {k.BM}) * {LD} + c] = 0.0f;"""
    store = None if epilogue else _store(g, p, "nchw")
    return f"""{PRELUDE}{TF32_PRELUDE}
extern "C" __global__ void __launch_bounds__({T}) egg_conv({args or kernel_args(g, p)}) {{
    extern __shared__ __align__(16) unsigned char smem[];
    float* As = reinterpret_cast<float*>(smem);  // two A buffers of {k.BM} rows x {KP} (+4) columns
    float* Bs = As + {2 * AEL};  // the group's weight, {k.BN} rows from n0, whole K
    const float* Bs_s = Bs;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / {k.WN}, wn = warp % {k.WN};
    const long long n0 = (long long)blockIdx.y * {k.BN};
    const int grp = blockIdx.z;
    const float* Bb = W + (long long)grp * {p.OCg * p.Kg}LL;
    for (int c = tid; c < {k.BN * P}; c += {T}) {{
        const int r = c / {P}, kc = (c % {P}) * 4;
        const bool ok = n0 + r < {p.OCg} && kc < {p.Kg};
        cp_async<16>(Bs + r * {LD} + kc, ok ? Bb + (n0 + r) * {p.Kg}LL + kc : W, ok ? 16 : 0);
    }}{pad}
    int tile = blockIdx.x;
{_gather(p, k, T, "As", "tile")}
    cp_async_commit();  // group 0: the weight and the first tile
    if (tile + (int)gridDim.x < {mt}) {{
{_gather(p, k, T, "As + " + str(AEL), "tile + (int)gridDim.x")}
    }}
    cp_async_commit();
    for (int i = 0; tile < {mt}; ++i, tile += gridDim.x) {{
        cp_async_wait<1>();  // tile i's group has landed (tile i + 1's may be in flight)
        __syncthreads();
        const float* As_s = As + (i & 1) * {AEL};
        float acc[{MI}][{NI}][4];
        #pragma unroll
        for (int mi = 0; mi < {MI}; ++mi)
            #pragma unroll
            for (int ni = 0; ni < {NI}; ++ni)
                #pragma unroll
                for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < {KP}; kk += 8) {{
            {frags}
            #pragma unroll
            for (int mi = 0; mi < {MI}; ++mi) {{
                const int rb = wm * {TMW} + mi * 16;
{a_reads}
            }}
            #pragma unroll
            for (int ni = 0; ni < {NI}; ++ni) {{
                const int cb = wn * {TNW} + ni * 8;
{b_reads}
            }}
            #pragma unroll
            for (int mi = 0; mi < {MI}; ++mi)
                #pragma unroll
                for (int ni = 0; ni < {NI}; ++ni) {{
                    {mmas}
                }}
        }}
        __syncthreads();  // every warp has read buffer i & 1: tile i + 2 goes there, under this tile's stores
        if (tile + 2 * (int)gridDim.x < {mt}) {{
            float* dst_ = As + (i & 1) * {AEL};
{_gather(p, k, T, "dst_", "tile + 2 * (int)gridDim.x")}
        }}
        cp_async_commit();
        const long long m0 = (long long)tile * {k.BM};
{epilogue(MI, NI, TMW, TNW) if epilogue else _fragment_store(p.M, p.OCg, MI, NI, TMW, TNW, store)}    }}
    cp_async_wait<0>();
}}
"""
