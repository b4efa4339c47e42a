"""Forward convolution (1-, 2- or 3-d, stride 1) as an implicit GEMM whose operand tiles come by TMA, no
gather: the channels-last staged input (conv.staging) is a tensor map (C, W[, H[, D]], N), and a block's
output pixels are a patch of Pw x Ph positions of one image (and depth), so for each kernel tap the
patch's input pixels are again a box of that map, shifted by the tap (padding and the patch's edges read
as zeros: the map's bounds). K runs over (tap, 32-channel chunk): one box of 32 channels a step, 128 bytes
a pixel, in the 128-byte swizzle wgmma reads; the staged weight (groups, OC/groups, taps x C/groups) is a
map too. A producer warpgroup issues both boxes a step (gemm_tf32.tma_producer), the consumer warpgroups
run TF32 wgmma on them (what eager's cuDNN runs), and the pointwise chain after the conv is fused into the
store (conv._store, one image's pixel at a time).

The cp.async conv (conv.py, layout "nhwc") has every thread decode a pixel's window and copy 16 bytes a
tap, a block-wide barrier a step; here no thread computes an address in the loop."""
from __future__ import annotations

import math

from agents.expert import host
from agents.expert.codegen import PRELUDE
from agents.expert.opgraph import OpGraph, Unsupported
from agents.expert.templates.conv import ConvPlan, _store, kernel_args, staged_nodes
from agents.expert.templates.gemm import GemmKnobs
from agents.expert.templates.gemm_tf32 import (BK, TF32_PRELUDE, TMA_PRELUDE, WGMMA_PRELUDE, tma_mainloop, tma_producer,
                                               tma_setup)


def ok(p: ConvPlan) -> str | None:
    """Why the TMA conv cannot take this conv (None: it can)."""
    if p.transposed or any(s != 1 for s in p.stride):
        return "the TMA conv is for forward convs of stride 1 (a strided patch is not a box)"
    if p.C % 4 or p.Kg % 4:
        return "the staged input's and weight's rows must be whole 16-byte pieces (channels a multiple of 4)"
    if p.groups > 1 and p.Cg % BK:
        return "grouped channels must come in whole 32-channel boxes"
    if p.N > 2 ** 31 or max(p.in_sp) > 2 ** 31:
        return "a dimension past a map's coordinates"
    return None


def patch(p: ConvPlan, k: GemmKnobs) -> tuple[int, int]:
    """(Pw, Ph): the block's output positions along the last dim and the one before: the power of two that
    holds a row (at most BM), and as many rows as make BM (1-d: BM positions of the row)."""
    OW = p.out_sp[-1]
    Pw = min(k.BM, 1 << max(0, (OW - 1).bit_length())) if p.nd > 1 else k.BM
    return Pw, (k.BM // Pw if p.nd > 1 else 1)


def tiles(p: ConvPlan, k: GemmKnobs) -> tuple[int, ...]:
    """Patches per image along (W, H, D): W and H in patches, D one position a patch."""
    Pw, Ph = patch(p, k)
    out = [-(-p.out_sp[-1] // Pw)]
    if p.nd > 1:
        out.append(-(-p.out_sp[-2] // Ph))
    if p.nd > 2:
        out.append(p.out_sp[0])
    return tuple(out)


def check(p: ConvPlan, k: GemmKnobs) -> None:
    if (why := ok(p)) is not None:
        raise Unsupported(why)
    if k.BM not in (64, 128) or k.BN not in (64, 128, 256) or k.stages < 2:
        raise Unsupported("the TMA conv runs one or two consumer warpgroups, 64 to 256 channels, 2 stages or more")
    if patch(p, k)[0] * patch(p, k)[1] != k.BM:
        raise Unsupported("a patch of BM output positions")


def grid(p: ConvPlan, k: GemmKnobs) -> tuple[int, int, int]:
    """Patches (of every image) on x, channel tiles on y, groups on z."""
    n = p.N * math.prod(tiles(p, k))
    if n >= 2 ** 31 or -(-p.OCg // k.BN) > 65535 or p.groups > 65535:
        raise Unsupported("more patches, channel tiles or groups than a grid holds")
    return (n, -(-p.OCg // k.BN), p.groups)


def shared_bytes(p: ConvPlan, k: GemmKnobs) -> int:
    return k.stages * (k.BM + k.BN) * BK * 4 + 16 * k.stages


def tensor_maps(p: ConvPlan, k: GemmKnobs) -> list[host.TensorMap]:
    """The staged input (C, W[, H[, D]], N) in boxes of 32 channels x the patch, and the staged weight
    (taps x C/groups, OC/groups, groups) in boxes of 32 x BN."""
    xt, wt = staged_nodes(p)
    Pw, Ph = patch(p, k)
    sp = tuple(reversed(p.in_sp))  # innermost first: W, H, D
    box = (BK, Pw) + ((Ph,) if p.nd > 1 else ()) + (1,) * (p.nd - 2) + (1,)
    return [host.TensorMap(xt, (p.C,) + sp + (p.N,), box, 0, 4),
            host.TensorMap(wt, (p.Kg, p.OCg, p.groups), (BK, k.BN, 1), 0, 4)]


def render(g: OpGraph, p: ConvPlan, k: GemmKnobs) -> str:
    """`egg_conv(mX, mW, <the conv's arguments>)` on the staged tensors (conv.staging_source after it)."""
    check(p, k)
    NW, S, NI = k.BM // 64, k.stages, k.BN // 8
    T = k.threads(True)
    EA, EB = k.BM * BK, k.BN * BK
    Pw, Ph = patch(p, k)
    CT = -(-p.Cg // BK)  # 32-channel chunks a tap
    taps = math.prod(p.ker)
    tl = tiles(p, k)
    # the block's patch: image, then (D,) H, W tiles; its origin in output positions
    dec = ["    long long rest_ = blockIdx.x;", f"    const int tw = (int)(rest_ % {tl[0]}); rest_ /= {tl[0]};"]
    if p.nd > 1:
        dec.append(f"    const int th = (int)(rest_ % {tl[1]}); rest_ /= {tl[1]};")
    if p.nd > 2:
        dec.append(f"    const int od = (int)(rest_ % {tl[2]}); rest_ /= {tl[2]};")
    dec += ["    const int img = (int)rest_, grp = bz;", f"    const int ow0 = tw * {Pw}{f', oh0 = th * {Ph}' if p.nd > 1 else ''};"]
    # the producer: step kt is tap kt / CT, chunk kt % CT; the tap's kernel offsets per dim, last fastest
    tap = [f"int r_ = kt / {CT};"]
    for d in reversed(range(p.nd)):
        tap.append(f"const int k{d} = r_ % {p.ker[d]}; r_ /= {p.ker[d]};")
    c = f"grp * {p.Cg} + (kt % {CT}) * {BK}"
    w = f"ow0 - {p.pad[-1]} + k{p.nd - 1} * {p.dil[-1]}"
    coords = [c, w]
    if p.nd > 1:
        coords.append(f"oh0 - {p.pad[-2]} + k{p.nd - 2} * {p.dil[-2]}")
    if p.nd > 2:
        coords.append(f"od - {p.pad[0]} + k0 * {p.dil[0]}")
    coords.append("img")
    loads = [" ".join(tap),
             f"tma_load{'' if len(coords) == 3 else len(coords)}(sA + s * {EA}, &mX, {', '.join(coords)}, full + s);",
             f"tma_load(sB + s * {EB}, &mW, (kt / {CT}) * {p.Cg} + (kt % {CT}) * {BK}, (int)n0, grp, full + s);"]
    KT = taps * CT
    steps = "\n".join(f"        wgmma_tf32_n{k.BN}(d, wg_desc_sw128(sA_s + {kk * 8}), wg_desc_sw128(sB_s + {kk * 8}));"
                      for kk in range(BK // 8))
    OW, OH = p.out_sp[-1], (p.out_sp[-2] if p.nd > 1 else 1)
    pix = "(long long)ow" if p.nd == 1 else (f"(long long)oh * {OW} + ow" if p.nd == 2 else f"((long long)od * {OH} + oh) * {OW} + ow")
    return f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{TMA_PRELUDE}
extern "C" __global__ void __launch_bounds__({T}, 1) egg_conv(const __grid_constant__ EggTmap mX, const __grid_constant__ EggTmap mW, {kernel_args(g, p)}) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sA = reinterpret_cast<float*>(smem);
    float* sB = sA + {S * EA};
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wg = tid >> 7, wq = (tid >> 5) & 3;  // warpgroup: 64 of the patch's positions; warp in it: 16 of those
    const long long n0 = (long long)blockIdx.y * {k.BN};
    const int bz = blockIdx.z;
{chr(10).join(dec)}
{tma_setup(S, NW, f"sB + {S * EB}")}{tma_producer(S, NW, KT, (k.BM + k.BN) * BK * 4, loads)}{tma_mainloop(S, KT, EA, EB, BK, NI, steps)}    const int mi = 0;
    #pragma unroll
    for (int ni = 0; ni < {NI}; ++ni)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
            const int r = wg * 64 + wq * 16 + g + 8 * h;  // the position in the patch
            const int ow = ow0 + r % {Pw}{f', oh = oh0 + r / {Pw}' if p.nd > 1 else ''};
            #pragma unroll
            for (int e = 0; e < 2; ++e) {{
                const long long n = n0 + ni * 8 + 2 * t + e;
                if (ow < {OW}{f' && oh < {OH}' if p.nd > 1 else ''} && n < {p.OCg}) {{
                    const long long m = {pix};
{_store(g, p, "gemm")}
                }}
            }}
        }}
}}
"""
