"""bf16/fp16 GEMM on Hopper's warpgroup MMA (`wgmma.m64nNk16`, fp32 accumulation).

The mma.sync kernel (gemm.render_tc) ran KernelBench-like bf16 GEMMs at about 30% of cuBLAS on the H200
(8192^3: 5.19 ms against 1.41). This is the planes GEMM's structure (gemm_tf32.render_planes, 1.58 ms
against mma.sync's 2.67 at 4096^3 fp32) on 16-bit operands: a first kernel stages A and B K-major and
padded to whole tiles (B transposed through shared memory where it is (K, N)), then the GEMM reads whole
canonical tiles in the 128-byte swizzle with no bounds test, one MMA a k-step of 16, a ring of cp.async
tiles, blocks walking the output in groups of row tiles.

The tiles are addressed in 32-bit words (two 16-bit elements): a 128-byte row of K is 64 elements, 32
words, exactly the TF32 tile row, and a k-step of 16 elements is 32 bytes as TF32's k8 is, so the
canonical layout, its swizzle, the loaders and the descriptors are the TF32 ones (Operand with K in words).
"""
from __future__ import annotations

import dataclasses

from agents.expert import host
from agents.expert.codegen import CLUSTER_PRELUDE, PRELUDE
from agents.expert.opgraph import Node, OpGraph, Unsupported
from agents.expert.templates.gemm import GemmKnobs, GemmPlan, kernel_args
from agents.expert.templates.gemm_tf32 import (B_K_MAJOR, MCAST_PRELUDE, NAMED_BAR_PRELUDE, PAIR_PRELUDE, TF32_PRELUDE, TMA_PRELUDE,
                                               WGMMA_NS, WGMMA_PRELUDE, Operand, entry_base,
                                               tma_barrier_bytes, tma_mainloop, tma_pingpong, tma_producer, tma_setup, wg_ring,
                                               WG_THREAD, _wg_store, _wgmma_fn, pair_store, grouped_tile, output_store, plane_batches, tile_coords,
                                               whole_tile_loads, workspace_bases)

BKW = 32  # a tile's K in words: 64 elements, one 128-byte swizzle row
STAGE_BLOCK = 256
KIND = {"bfloat16": "bf16", "float16": "f16"}


# the MMA functions a kind, one prelude each (the CPU emulator replaces them)
WGMMA16_PRELUDES = {kind: "".join(_wgmma_fn(n, kind) for n in WGMMA_NS) for kind in KIND.values()}
# B MN-major (a row-major (K, N) B copied by TMA as it is): its descriptor and the MMAs that read it so
MN_DESC = r"""__device__ __forceinline__ unsigned long long wg_desc_mn128(const float* p, unsigned lbo) {
    // MN-major in the 128-byte swizzle: rows of 64 N elements (128 bytes) along K, 8-row groups 1024 bytes
    // apart (SBO), 64-column blocks `lbo` bytes apart (LBO), layout type 1
    const unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ULL << 62);
}
"""
WGMMA16_TB_PRELUDES = {kind: MN_DESC + "".join(_wgmma_fn(n, kind, tb=True) for n in WGMMA_NS) for kind in KIND.values()}
MAPS_ARGS = "const __grid_constant__ EggTmap mA, const __grid_constant__ EggTmap mB"
# a 64-column block of B MN-major: 64 rows of K by 128 bytes (BKW words), in words
MN_BLOCK = 64 * BKW



def padded(p: GemmPlan, k: GemmKnobs) -> tuple[int, int, int]:
    """(Mp, Np, Kp): the staged operands' rows and K (elements), whole tiles."""
    kq = 2 * BKW
    return -(-p.M // k.BM) * k.BM, -(-p.N // k.BN) * k.BN, -(-p.K // kq) * kq


def check(p: GemmPlan, k: GemmKnobs) -> None:
    if p.dtype not in KIND:
        raise Unsupported("the 16-bit warpgroup MMA takes bf16 or fp16 operands")
    if k.splitk != 1 or p.batch > 65535:
        raise Unsupported("the 16-bit wgmma GEMM is for whole-K GEMMs of at most 65535 batches")
    if k.BM % 64 or k.BM > 256 or k.BN not in WGMMA_NS or k.stages < 3:
        raise Unsupported("wgmma tile shape (a ring of 3 stages or more: one step's MMAs stay in flight)")
    if p.a_layout != "mk":
        raise Unsupported("a transposed A on the 16-bit wgmma GEMM")
    if k.direct and not direct_ok(p, k.tma):
        raise Unsupported("direct tiles need A (M, K) with K a multiple of 8 and B (N, K), or with TMA B (K, N) with N a multiple of 8")
    if b_mn(p, k) and k.BN % 64:
        raise Unsupported("B read MN-major takes 64 columns a box: BN a multiple of 64")
    if k.tma and k.BM not in (64, 128):
        raise Unsupported("the TMA GEMM runs one or two consumer warpgroups (BM 64 or 128)")
    if k.mcast and (not k.tma or k.pingpong or -(-p.M // k.BM) % 2 or b_mn(p, k) and k.BN % 128):
        raise Unsupported("B multicast over clusters of two row tiles: the TMA ring (not ping-pong), an even number of row "
                          "tiles (B MN-major: an even number of 64-column boxes)")
    if k.pingpong and not (k.persist and k.BM == 128 and not k.mcast):
        raise Unsupported("ping-pong: the persistent TMA ring's two consumer warpgroups (BM 128) taking 64-row tiles in turn")
    if k.persist and (not k.tma or -(-p.M // k.BM) * -(-p.N // k.BN) * p.batch >= 2 ** 31):
        raise Unsupported("a persistent tile loop on the TMA ring (fewer than 2^31 tiles)")


def direct_ok(p: GemmPlan, tma: bool = False) -> bool:
    """Both operands K-contiguous in 16-byte pieces (A (M, K), B (N, K): an nn.Linear's weight), or with
    `tma` B row-major (K, N) with rows of 16-byte pieces (read MN-major, the MMA's B transposed): the ring
    copies their tiles straight from the tensors into the swizzled layout, with no staging pass (a read
    and a write of both operands, and a launch)."""
    if p.a_layout != "mk" or p.K % 8:
        return False
    return p.b_layout == "nk" or (tma and p.b_layout == "kn" and p.N % 8 == 0)


def b_mn(p: GemmPlan, k: GemmKnobs) -> bool:
    """B read MN-major: a (K, N) B copied by TMA as it is, 64 columns a box."""
    return k.tma and k.direct and p.b_layout == "kn"


def b_chunks(p: GemmPlan, k: GemmKnobs) -> bool:
    """B MN-major in one 4-d box a k-tile: (64 columns, K, N / 64 blocks, batch), the blocks 128 bytes apart."""
    return b_mn(p, k) and k.bchunks and p.N % 64 == 0 and not k.mcast


def staged_node(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> Node:
    """The staged operands' workspace, in words: A (batches, Mp, Kp) then B (batches, Np, Kp), 16-bit."""
    Mp, Np, Kp = padded(p, k)
    ba, bb = plane_batches(p)
    return Node(f"{p.gemm.name}_staged", "input", shape=((ba * Mp + bb * Np) * Kp // 2,), dtype="float32")


def stage_grid(p: GemmPlan, k: GemmKnobs) -> tuple[int, int]:
    """A 32-row by 64-element tile of A or B a block on x, the batch on y."""
    Mp, Np, Kp = padded(p, k)
    return ((Mp // 32 + Np // 32) * (Kp // 64), max(plane_batches(p)))


def a_rows(k: GemmKnobs) -> int:
    """A's rows a ring slot holds: the tile's BM, or with `pingpong` a consumer warpgroup's 64 (its own tile)."""
    return 64 if k.pingpong else k.BM


def shared_bytes(p: GemmPlan, k: GemmKnobs) -> int:
    """The ring (and with `tma` its two barriers a stage)."""
    return k.stages * (a_rows(k) + k.BN) * BKW * 4 + (tma_barrier_bytes(k.stages) if k.tma else 0)


def grid(p: GemmPlan, k: GemmKnobs, sms: int = 132) -> tuple[int, int, int]:
    """Row tiles on x, column tiles on y, the batch on z; `persist`: a block an SM (at most one a tile), with
    `mcast` an even number of them (clusters of two)."""
    mt, nt = -(-p.M // k.BM), -(-p.N // k.BN)
    if k.persist:
        c = 2 if k.mcast else 1
        return (min(mt * nt * p.batch, sms) // c * c, 1, 1)
    if nt > 65535:
        raise Unsupported("more than 65535 column tiles")
    return (mt, nt, p.batch)


def _staged_bases(p: GemmPlan, k: GemmKnobs) -> dict[str, str]:
    """The batch entry bz's staged A and B in the workspace P (words)."""
    Mp, Np, Kp = padded(p, k)
    ba, bb = plane_batches(p)
    return workspace_bases([("A", Mp, ba), ("B", Np, bb)], Kp // 2, "bz")


def _stage_source(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """`egg_gemm_stage`: a 32 x 64 tile of A or B a block, read along its contiguous dim into shared memory,
    written K-major (16-bit elements) into the workspace; zeros past the edges."""
    Mp, Np, Kp = padded(p, k)
    ba, bb = plane_batches(p)
    ta = (Mp // 32) * (Kp // 64)
    args = kernel_args(g, p).split(", ", 1)[1]

    def tile(src: str, R: int, kcontig: bool, dst: str) -> str:
        if kcontig:  # (R, K) row-major: read along K, 64 elements a row
            load = (f"const int r = c / 64, kk = c % 64; const long long gr = r0 + r, gk = k0 + kk;\n"
                    f"                s[r][kk] = (gr < {R} && gk < {p.K}) ? src[gr * {p.K}LL + gk] : 0;")
        else:  # (K, R) row-major: read along R, 32 rows of the tile a K row
            load = (f"const int kk = c / 32, r = c % 32; const long long gr = r0 + r, gk = k0 + kk;\n"
                    f"                s[r][kk] = (gr < {R} && gk < {p.K}) ? src[gk * {R}LL + gr] : 0;")
        return f"""        const unsigned short* src = reinterpret_cast<const unsigned short*>({src});
        unsigned short* dst = reinterpret_cast<unsigned short*>({dst});
        for (int c = threadIdx.x; c < 2048; c += {STAGE_BLOCK}) {{
            {load}
        }}
        __syncthreads();
        for (int c = threadIdx.x; c < 2048; c += {STAGE_BLOCK}) {{
            const int r = c / 64, kk = c % 64;
            dst[(r0 + r) * {Kp}LL + k0 + kk] = s[r][kk];
        }}"""
    a, b = entry_base("A", p.M * p.K, ba > 1), entry_base("B", p.K * p.N, bb > 1)
    pl = _staged_bases(p, k)
    return f"""
extern "C" __global__ void __launch_bounds__({STAGE_BLOCK}) egg_gemm_stage(float* __restrict__ P, {args}) {{
    __shared__ unsigned short s[32][66];
    const int bz = blockIdx.y;
    (void)bz;
    long long b = blockIdx.x;
    if (b < {ta}LL) {{
        if (bz >= {ba}) return;  // an operand shared by the batch: staged once
        const long long r0 = (b / {Kp // 64}) * 32, k0 = (b % {Kp // 64}) * 64;
{tile(a, p.M, True, pl["A"])}
    }} else {{
        if (bz >= {bb}) return;
        b -= {ta}LL;
        const long long r0 = (b / {Kp // 64}) * 32, k0 = (b % {Kp // 64}) * 64;
{tile(b, p.N, p.b_layout == "nk", pl["B"])}
    }}
}}
"""


def tensor_maps(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> list[host.TensorMap]:
    """`tma`: the maps of A's and B's tiles, (K, rows, batches) each, boxes of 64 x BM (BN) x 1: the
    tensors themselves (`direct`; the map's bounds zero-fill the edges; B (K, N) in boxes of 64 columns by 64
    rows of K) or the staged workspace. `mcast`: B's K-major box half the tile's rows (a block copies half)."""
    ba, bb = plane_batches(p)
    bn = k.BN // 2 if k.mcast else k.BN
    if k.direct:
        b = (host.TensorMap(p.b_src, (64, p.K, p.N // 64, bb), (64, 2 * BKW, k.BN // 64, 1), strides=(2 * p.N, 128, 2 * p.K * p.N))
             if b_chunks(p, k) else host.TensorMap(p.b_src, (p.N, p.K, bb), (64, 2 * BKW, 1)) if b_mn(p, k) else
             host.TensorMap(p.b_src, (p.K, p.N, bb), (2 * BKW, bn, 1)))
        return [host.TensorMap(p.a_src, (p.K, p.M, ba), (2 * BKW, a_rows(k), 1)), b]
    Mp, Np, Kp = padded(p, k)
    P = staged_node(g, p, k)
    return [host.TensorMap(P, (Kp, Mp, ba), (2 * BKW, a_rows(k), 1)),
            host.TensorMap(P, (Kp, Np, bb), (2 * BKW, bn, 1), ba * Mp * Kp)]


def render_tma(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """`egg_gemm(mA, mB, <the GEMM's arguments>)`, warp-specialised: a producer warpgroup (one thread of
    it) copies each k-tile of A and B by TMA into a ring slot and arms the slot's `full` barrier with the
    bytes; BM / 64 consumer warpgroups wait on it, issue the tile's MMAs and, once the step after has
    issued its own (one step's MMAs in flight), release the slot through its `empty` barrier. No thread
    computes an address or waits on a block-wide barrier in the loop (the cp.async ring's every thread
    did both); the producer gives its registers to the consumers (setmaxnreg). `mcast`: blocks in clusters
    of two on neighbouring row tiles of one column tile, block r copying half r of B's k-tile into both
    rings (TMA multicast; each `full` barrier still counts the whole tile's bytes), a slot going back to the
    producers once both blocks' consumers are done with it."""
    Mp, Np, Kp = padded(p, k)
    kind = KIND[p.dtype]
    NW, S, NI = k.BM // 64, k.stages, k.BN // 8
    C = 2 if k.mcast else 1
    T = k.threads(True)
    EA, EB = a_rows(k) * BKW, k.BN * BKW
    ba, bb = plane_batches(p)
    KT = -(-p.K // (2 * BKW)) if k.direct else Kp // (2 * BKW)
    mt, nt = Mp // k.BM, Np // k.BN
    store = pair_store(g, p, NI, "wg * 64 + wq * 16")
    nbytes = (EA + EB) * 4  # a slot's A and B tiles
    mn = b_mn(p, k)
    mma = f"wgmma_{kind}_n{k.BN}{'_tb' if mn else ''}"
    zb = 'bz' if bb > 1 else '0'
    if C > 1:  # half of B's k-tile a block, into both blocks' slots (boxes 2j + r MN-major; rows r * BN / 2 on K-major)
        half = k.BN // 2
        b_loads = ([f"tma_load_mc(sB + s * {EB} + (2 * {j} + crank) * {MN_BLOCK}, &mB, (int)n0 + 64 * (2 * {j} + crank), "
                    f"kt * {2 * BKW}, {zb}, full + s, 3);" for j in range(k.BN // 128)] if mn else
                   [f"tma_load_mc(sB + s * {EB} + crank * {half * BKW}, &mB, kt * {2 * BKW}, (int)n0 + crank * {half}, {zb}, full + s, 3);"])
    elif b_chunks(p, k):  # the k-tile's BN / 64 blocks in one box, block after block
        b_loads = [f"tma_load4(sB + s * {EB}, &mB, 0, kt * {2 * BKW}, (int)(n0 / 64), {zb}, full + s);"]
    else:  # B MN-major: a box of 64 columns by the k-tile's 64 rows a block of the slot (B's rows 128 bytes, the swizzle's)
        b_loads = ([f"tma_load(sB + s * {EB} + {c * MN_BLOCK}, &mB, (int)n0 + {64 * c}, kt * {2 * BKW}, {zb}, full + s);"
                    for c in range(k.BN // 64)] if mn else [f"tma_load(sB + s * {EB}, &mB, kt * {2 * BKW}, (int)n0, {zb}, full + s);"])
    loads = [f"tma_load(sA + s * {EA}, &mA, kt * {2 * BKW}, (int)m0, {'bz' if ba > 1 else '0'}, full + s);"] + b_loads
    # a k-step of 16 is 32 bytes along A's rows, 16 rows of 128 bytes down B's MN-major blocks
    b_desc = f"wg_desc_mn128(sB_s + {{kk}} * 64, {MN_BLOCK * 4})" if mn else B_K_MAJOR
    mmas = WGMMA16_PRELUDES[kind] + (WGMMA16_TB_PRELUDES[kind] if mn else "")
    cluster = CLUSTER_PRELUDE + MCAST_PRELUDE if C > 1 else ""
    named = NAMED_BAR_PRELUDE if k.pingpong else ""
    head = f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{mmas}{TMA_PRELUDE}{named}{cluster}{PAIR_PRELUDE}{"" if k.direct else _stage_source(g, p, k)}
extern "C" __global__ void {"__cluster_dims__(2, 1, 1) " if C > 1 else ""}__launch_bounds__({T}, 1) egg_gemm({MAPS_ARGS}, {kernel_args(g, p)}) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sA = reinterpret_cast<float*>(smem);
    float* sB = sA + {S * EA};
{"    const unsigned crank = cluster_rank();  // this block's half of B" + chr(10) if C > 1 else ""}"""
    if k.pingpong:  # the block's 64-row tiles, the consumer warpgroups taking them in turn (gemm_tf32.tma_pingpong)
        mt = Mp // 64
        n = mt * nt * p.batch
        tiles = (str(n), tile_coords(mt, nt, dataclasses.replace(k, BM=64), f"tile % {mt * nt}", f"tile / {mt * nt}", ""))
        return (head + WG_THREAD + tma_setup(S, 1, f"sB + {S * EB}") + tma_producer(S, NW, KT, nbytes, loads, tiles)
                + tma_pingpong(S, KT, EA, EB, BKW, NI, mma, tiles, pair_store(g, p, NI, "wq * 16"), b_desc) + "}\n")
    leave = "    cluster_sync();  // no block leaves while the other may still release a slot to it\n" if C > 1 else ""
    if k.persist:  # the block's tiles in turn (tile_coords decodes each, in grouped order within its batch entry); `mcast`:
        # a cluster's two blocks (x 2c and 2c + 1, an even grid) take tiles 2j and 2j + 1, neighbouring row tiles of one
        # column tile (mt even: so are GROUP_M's groups), and as many of them, so their rings run in step
        n = mt * nt * p.batch
        tiles = (str(n), tile_coords(mt, nt, k, f"tile % {mt * nt}", f"tile / {mt * nt}", ""))
        return (head + WG_THREAD + tma_setup(S, NW, f"sB + {S * EB}", C) + tma_producer(S, NW, KT, nbytes, loads, tiles, C)
                + tma_mainloop(S, KT, EA, EB, BKW, NI, mma, tiles, store, b_desc, C) + leave + "}\n")
    return (f"""{head}{grouped_tile(mt, nt, k)}{tma_setup(S, NW, f"sB + {S * EB}", C)}{tma_producer(S, NW, KT, nbytes, loads, peers=C)}"""
            + tma_mainloop(S, KT, EA, EB, BKW, NI, mma, b_desc=b_desc, peers=C) + store + leave + "}\n")


def render(g: OpGraph, p: GemmPlan, k: GemmKnobs) -> str:
    """The stage kernel, then `egg_gemm(out, P, <the GEMM's arguments>)` on the staged tiles; `direct`:
    `egg_gemm(<the GEMM's arguments>)` alone, its tiles copied from the tensors."""
    check(p, k)
    if k.tma:
        return render_tma(g, p, k)
    Mp, Np, Kp = padded(p, k)
    Kw = Kp // 2
    kind = KIND[p.dtype]
    T, S, NI = k.threads(True), k.stages, k.BN // 8
    EA, EB = k.BM * BKW, k.BN * BKW
    if k.direct:  # the tensors' own rows, in words (bounds tested: they are not padded)
        ops = {"A": Operand("A", k.BM, p.M, p.K // 2, True, 4, True, BKW, True, tail=Kp > p.K),
               "B": Operand("B", k.BN, p.N, p.K // 2, True, 4, True, BKW, True, tail=Kp > p.K)}
        bases = {n: entry_base(f"reinterpret_cast<const float*>({n})", rows * p.K // 2, batched)
                 for n, rows, batched in (("A", p.M, p.a_batched), ("B", p.N, p.b_batched))}
    else:
        ops = {"A": Operand("A", k.BM, Mp, Kw, True, 4, True, BKW, True), "B": Operand("B", k.BN, Np, Kw, True, 4, True, BKW, True)}
        bases = _staged_bases(p, k)
    load, fast_head = whole_tile_loads(ops, bases, T)
    args = kernel_args(g, p).split(", ", 1)
    head_args = kernel_args(g, p) if k.direct else f"{args[0]}, const float* __restrict__ P, {args[1]}"
    steps = "\n".join(f"            wgmma_{kind}_n{k.BN}(d, {ops['A'].desc('sA_s', kk * 8)}, {ops['B'].desc('sB_s', kk * 8)});"
                      for kk in range(BKW // 8))
    store = output_store(g, p)[2]
    mt, nt = Mp // k.BM, Np // k.BN
    head, wait, top, bottom = wg_ring(Kw, S, load, k.lead, BKW)
    return f"""{PRELUDE}{TF32_PRELUDE}{WGMMA_PRELUDE}{WGMMA16_PRELUDES[kind]}{"" if k.direct else _stage_source(g, p, k)}
extern "C" __global__ void __launch_bounds__({T}) egg_gemm({head_args}) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    float* sA = reinterpret_cast<float*>(smem);
    float* sB = sA + {S * EA};
{grouped_tile(mt, nt, k)}    float d[{NI * 4}];
    #pragma unroll
    for (int q = 0; q < {NI * 4}; ++q) d[q] = 0.0f;
{fast_head}{head}    // one step's MMAs left in flight while the next tile is waited for (wg_ring)
    for (int kt = 0; kt < KT; ++kt) {{
        cp_async_wait<{wait}>();
        fence_proxy_async();
        __syncthreads();
{top}        const int sl = kt % {S};
        const float* sA_s = sA + sl * {EA} + wg * {64 * BKW};
        const float* sB_s = sB + sl * {EB};
        wgmma_fence();
{steps}
        wgmma_commit();
        wgmma_wait1();
{bottom}    }}
    wgmma_wait0();
    float acc[1][{NI}][4];
    #pragma unroll
    for (int q = 0; q < {NI * 4}; ++q) acc[0][q / 4][q % 4] = d[q];
{_wg_store(NI, p.M, p.N, store, "wg * 64 + wq * 16")}"""
