"""Convolution (1-, 2- or 3-d; forward of stride 1, or transposed by output phase) as an implicit GEMM
whose operand tiles come by TMA, no gather: the channels-last staged input (conv.staging) is a tensor map
(C, W[, H[, D]], N), and a block's output positions are a patch of Pw x Ph positions of one image (and
depth), so for each kernel tap the patch's input pixels are again a box of that map, shifted by the tap
(padding and the patch's edges read as zeros: the map's bounds). A strided transposed conv's phase (the
outputs o = j * stride + r) reads input j + (r + pad - k * dil) / stride for each of its taps k:
consecutive in j, a box again. K runs over (tap, 32-channel box): 128 bytes a pixel, in the 128-byte
swizzle wgmma reads; the staged weight (groups x phases, OC/groups, taps x C/groups) is a map too. A
producer warpgroup issues both boxes a step (gemm_tf32.tma_producer), the consumer warpgroups run TF32
wgmma on them (what eager's cuDNN runs), and the pointwise chain after the conv is fused into the store
(conv._store, one image's pixel at a time). `persist`: a block an SM walks the tiles; `pingpong` with it: the two
consumer warpgroups take 64-position tiles in turn, one's epilogue under the other's MMAs.

The cp.async conv (conv.py, layout "nhwc") has every thread decode a pixel's window and copy 16 bytes a
tap, a block-wide barrier a step; here no thread computes an address in the loop."""
from __future__ import annotations

import math

from agents.expert import host
from agents.expert.codegen import PRELUDE
from agents.expert.opgraph import OpGraph, Unsupported
from agents.expert.templates.conv import ConvPlan, _phase_decode, _store, _tap_decode, kernel_args, staged_nodes
from agents.expert.templates.gemm import GemmKnobs
from agents.expert.templates.gemm_tf32 import (BK, NAMED_BAR_PRELUDE, TF32_PRELUDE, TMA_PRELUDE, WG_THREAD, WGMMA_PRELUDE,
                                               tma_barrier_bytes, tma_mainloop, tma_pingpong, tma_producer, tma_setup)


def ok(p: ConvPlan) -> str | None:
    """Why the TMA conv cannot take this conv (None: it can)."""
    if not p.transposed and any(s != 1 for s in p.stride):
        return "the TMA conv is for forward convs of stride 1 (a strided patch is not a box) and transposed ones"
    if p.C % 4 or p.Kg % 4:
        return "the staged input's and weight's rows must be whole 16-byte pieces (channels a multiple of 4)"
    if p.groups > 1 and p.Cg % BK:
        return "grouped channels must come in whole 32-channel boxes"
    if p.N > 2 ** 31 or max(p.in_sp) > 2 ** 31:
        return "a dimension past a map's coordinates"
    return None


def first_for(p: ConvPlan) -> bool:
    """A forward conv whose taps fill 32-channel boxes: the TMA conv's persistent loop is its first design (H100,
    level 2 task 1's conv kernel 1.53 ms against the cp.async ring's 2.16, cuDNN's 1.53)."""
    return not p.transposed and p.Cg >= BK and ok(p) is None


def extent(p: ConvPlan) -> tuple[int, ...]:
    """The positions a block's patch ranges over per dim: the output's, or a phase's (a strided transposed
    conv's phase r holds the outputs o = j * stride + r; phase 0 the most)."""
    return tuple(-(-o // s) for o, s in zip(p.out_sp, p.stride)) if p.phased else tuple(p.out_sp)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def rows(k: GemmKnobs) -> int:
    """A tile's output positions: BM, or with `pingpong` a consumer warpgroup's 64."""
    return 64 if k.pingpong else k.BM


def patch(p: ConvPlan, k: GemmKnobs) -> tuple[int, int, int]:
    """(Pw, Ph, Pn): the block's output positions along the last dim, the one before (1-d: 1) and images:
    the power of two that holds a row (at most BM), as many rows as hold a plane and make at most BM, and
    as many images as make BM (small maps, a ResNet's 7x7: several images a patch instead of positions
    past the map; a 3-d conv's patch is one image's, at one depth)."""
    ext, BM = extent(p), rows(k)
    Pw = min(BM, _pow2(ext[-1]))
    if p.nd == 1:
        return Pw, 1, BM // Pw
    if p.nd == 3:
        return Pw, BM // Pw, 1
    Ph = min(BM // Pw, _pow2(ext[-2]))
    return Pw, Ph, BM // (Pw * Ph)


def tiles(p: ConvPlan, k: GemmKnobs) -> tuple[int, ...]:
    """Patches along (W, H, D, images): W and H in patches, D one position a patch, images Pn a patch."""
    Pw, Ph, Pn = patch(p, k)
    ext = extent(p)
    out = [-(-ext[-1] // Pw)]
    if p.nd > 1:
        out.append(-(-ext[-2] // Ph))
    if p.nd > 2:
        out.append(ext[0])
    return tuple(out) + (-(-p.N // Pn),)


def check(p: ConvPlan, k: GemmKnobs) -> None:
    if (why := ok(p)) is not None:
        raise Unsupported(why)
    if k.BM not in (64, 128) or k.BN not in (64, 128, 256) or k.stages < 2:
        raise Unsupported("the TMA conv runs one or two consumer warpgroups, 64 to 256 channels, 2 stages or more")
    if k.pingpong and not (k.persist and k.BM == 128):
        raise Unsupported("ping-pong takes the persistent loop's tiles by two consumer warpgroups (BM 128)")
    if math.prod(patch(p, k)) != rows(k):
        raise Unsupported("a patch of a tile's output positions")


def grid(p: ConvPlan, k: GemmKnobs, sms: int = 132) -> tuple[int, int, int]:
    """Patches (of every image) by phases on x, the phase fastest (a patch's phases interleave their output
    lines: side by side they fill them in L2, conv.phases_first), channel tiles on y, groups on z;
    `persist`: a block an SM (at most one a tile)."""
    if k.persist:
        if grid_tiles(p, k) >= 2 ** 31:
            raise Unsupported("more tiles than a persistent loop counts")
        return (min(grid_tiles(p, k), sms), 1, 1)
    n = math.prod(tiles(p, k)) * p.R
    if n >= 2 ** 31 or -(-p.OCg // k.BN) > 65535 or p.groups > 65535:
        raise Unsupported("more patches, channel tiles or groups than a grid holds")
    return (n, -(-p.OCg // k.BN), p.groups)


def grid_tiles(p: ConvPlan, k: GemmKnobs) -> int:
    """The blocks of the grid (patches x phases x channel tiles x groups): a persistent loop's tiles."""
    return math.prod(tiles(p, k)) * p.R * -(-p.OCg // k.BN) * p.groups


def shared_bytes(p: ConvPlan, k: GemmKnobs) -> int:
    return k.stages * (rows(k) + k.BN) * BK * 4 + tma_barrier_bytes(k.stages)


def tensor_maps(p: ConvPlan, k: GemmKnobs) -> list[host.TensorMap]:
    """The staged input (C, W[, H[, D]], N) in boxes of 32 channels x the patch, and the staged weight
    (taps x C/groups, OC/groups, groups) in boxes of 32 x BN."""
    xt, wt = staged_nodes(p)
    Pw, Ph, Pn = patch(p, k)
    sp = tuple(reversed(p.in_sp))  # innermost first: W, H, D
    box = (BK, Pw) + ((Ph,) if p.nd > 1 else ()) + (1,) * (p.nd - 2) + (Pn,)
    return [host.TensorMap(xt, (p.C,) + sp + (p.N,), box, 0, 4),
            host.TensorMap(wt, (p.Kg, p.OCg, p.groups * p.R), (BK, k.BN, 1), 0, 4)]


def _coords(p: ConvPlan) -> tuple[list[str], list[str]]:
    """(the producer's statements for step kt's tap, the input map's coordinates of its box): per dim the
    tap's kernel offset k{d} and the box's first input position from the patch origin j0_{d}. Forward:
    j0 - pad + k * dil. Transposed: output o reads input (o + pad - k * dil) / stride where that divides;
    a phase's outputs o = j * stride + r take only the taps k0 + a * tap_step (conv._phase_decode), and
    for those the input is j + (r + pad - k * dil) / stride, consecutive in j: a box again. A phase's
    taps past the kernel have zero weights (the staging writes them so): their box may be anything."""
    tap = [f"int r_ = kt / {-(-p.Cg // BK)};", "bool tap_ok = true;"] + _tap_decode(p, "", "tap_ok") + ["(void)tap_ok;"]
    coords = []
    for d in range(p.nd):
        if p.phased:
            coords.append(f"(tap_ok ? j0_{d} + (r{d} + {p.pad[d]} - k{d} * {p.dil[d]}) / {p.stride[d]} : 0)")
        elif p.transposed:
            coords.append(f"j0_{d} + {p.pad[d]} - k{d} * {p.dil[d]}")
        else:
            coords.append(f"j0_{d} - {p.pad[d]} + k{d} * {p.dil[d]}")
    return tap, list(reversed(coords))  # the map's dims innermost first: W, H, D


def _decode(p: ConvPlan, k: GemmKnobs, idx: str, ind: str) -> list[str]:
    """The block's (or, persistent, the tile's) phase (fastest), patch and first image img0 from `idx`; the
    patch's origin j0 per dim in (phase) positions; persistent: then its channel tile n0 and group."""
    Pw, Ph, Pn = patch(p, k)
    tl, nd = tiles(p, k), p.nd
    dec = [f"long long rest_ = {idx};"]
    if p.phased:
        dec += [f"const int res = (int)(rest_ % {p.R}); rest_ /= {p.R};"] + _phase_decode(p, "res", "")
    dec.append(f"const int j0_{nd - 1} = (int)(rest_ % {tl[0]}) * {Pw}; rest_ /= {tl[0]};")
    if nd > 1:
        dec.append(f"const int j0_{nd - 2} = (int)(rest_ % {tl[1]}) * {Ph}; rest_ /= {tl[1]};")
    if nd > 2:
        dec.append(f"const int j0_0 = (int)(rest_ % {tl[2]}); rest_ /= {tl[2]};")
    if k.persist:
        nt = -(-p.OCg // k.BN)
        dec += [f"const int img0 = (int)(rest_ % {tl[-1]}) * {Pn}; rest_ /= {tl[-1]};",
                f"const long long n0 = (rest_ % {nt}) * {k.BN};", f"const int grp = (int)(rest_ / {nt});"]
    else:
        dec.append(f"const int img0 = (int)rest_ * {Pn}, grp = bz;")
    return [ind + ln for ln in dec]


def render(g: OpGraph, p: ConvPlan, k: GemmKnobs) -> str:
    """`egg_conv(mX, mW, <the conv's arguments>)` on the staged tensors (conv.staging_source after it).
    `persist`: a block an SM walks the (patch, phase, channel tile, group) tiles, the ring running on
    across them (the next tile's boxes load under this one's epilogue)."""
    check(p, k)
    NW, S, NI = k.BM // 64, k.stages, k.BN // 8
    T = k.threads(True)
    EA, EB = rows(k) * BK, k.BN * BK
    Pw, Ph, Pn = patch(p, k)
    CT = -(-p.Cg // BK)  # 32-channel boxes a tap
    nd = p.nd
    tap, coords = _coords(p)
    loads = [" ".join(tap),
             f"tma_load{'' if nd == 1 else nd + 2}(sA + s * {EA}, &mX, {', '.join([f'grp * {p.Cg} + (kt % {CT}) * {BK}'] + coords)}, img0, full + s);",
             f"tma_load(sB + s * {EB}, &mW, (kt / {CT}) * {p.Cg} + (kt % {CT}) * {BK}, (int)n0, "
             f"{f'grp * {p.R} + res' if p.phased else 'grp'}, full + s);"]
    KT = math.prod(p.taps) * CT
    # a patch position's output per dim (a phase's: j * stride + r), then its offset in the image
    local = {nd - 1: f"r % {Pw}", nd - 2: f"r / {Pw} % {Ph}"}
    outs = []
    for d in range(nd):
        j = f"j0_{d} + {local[d]}" if d in local else f"j0_{d}"
        outs.append(f"const int o{d} = ({j}){f' * {p.stride[d]} + r{d}' if p.phased else ''};")
    valid = " && ".join([f"o{d} < {p.out_sp[d]}" for d in range(nd)] + ([f"img < {p.N}"] if Pn > 1 else []))
    pix = "(long long)o0"
    for d in range(1, nd):
        pix = f"({pix} * {p.out_sp[d]} + o{d})"
    store = f"""    const int mi = 0;
    #pragma unroll
    for (int ni = 0; ni < {NI}; ++ni)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
            const int r = {"" if k.pingpong else "wg * 64 + "}wq * 16 + g + 8 * h;  // the position in the patch
            const int img = img0 + r / {Pw * Ph};
            {" ".join(outs)}
            #pragma unroll
            for (int e = 0; e < 2; ++e) {{
                const long long n = n0 + ni * 8 + 2 * t + e;
                if ({valid} && n < {p.OCg}) {{
                    const long long m = {pix};
{_store(g, p, "gemm", cl=k.cl_out, cat=k.cat_out)}
                }}
            }}
        }}
"""
    head = f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{TMA_PRELUDE}{NAMED_BAR_PRELUDE if k.pingpong else ""}
extern "C" __global__ void __launch_bounds__({T}, 1) egg_conv(const __grid_constant__ EggTmap mX, const __grid_constant__ EggTmap mW, {kernel_args(g, p)}) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sA = reinterpret_cast<float*>(smem);
    float* sB = sA + {S * EA};
{WG_THREAD}"""
    nbytes, mma = (rows(k) + k.BN) * BK * 4, f"wgmma_tf32_n{k.BN}"
    if k.persist:
        n = str(grid_tiles(p, k))
        tiles = (n, "\n".join(_decode(p, k, "tile", "")) + "\n")
        if k.pingpong:  # a slot has one consumer: `empty` counts one arrival
            return (head + tma_setup(S, 1, f"sB + {S * EB}") + tma_producer(S, NW, KT, nbytes, loads, tiles)
                    + tma_pingpong(S, KT, EA, EB, BK, NI, mma, tiles, store) + "}\n")
        return (head + tma_setup(S, NW, f"sB + {S * EB}") + tma_producer(S, NW, KT, nbytes, loads, tiles)
                + tma_mainloop(S, KT, EA, EB, BK, NI, mma, tiles, store) + "}\n")
    return (head + f"""    const long long n0 = (long long)blockIdx.y * {k.BN};
    const int bz = blockIdx.z;
""" + "\n".join(_decode(p, k, "blockIdx.x", "    ")) + "\n" + tma_setup(S, NW, f"sB + {S * EB}")
            + tma_producer(S, NW, KT, nbytes, loads) + tma_mainloop(S, KT, EA, EB, BK, NI, mma) + store + "}\n")
