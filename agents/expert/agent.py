"""The expert agent: deterministic, offline. It reads the reference's op graph, picks a kernel
family, and at each stage proposes variants of that stage's own knobs only."""
from __future__ import annotations

import math
import re
import sys
from collections import Counter

from agents import principles
from agents.protocol import Proposal, ProposedKernel, StageRequest
from state import MODULE_PART, eager_ran_tf32
from agents.expert import advice, host, program
from dataclasses import replace

from agents.expert.codegen import CLUSTER_PRELUDE, PRELUDE
from agents.expert.templates.gemm_tf32 import TF32_PRELUDE, WGMMA_PRELUDE
from agents.expert.templates.scan import BOOL_PRELUDE
from agents.expert.opgraph import OpGraph, Unsupported, ancestors, export_graph
from agents.expert.templates import (attention, colreduce, conv, conv_pooled, conv_rows, conv_short, conv_stats, conv_sum, conv_tma, direct_conv, gemm,
                                    gemm_stream, gemm_sum, gemm_tf32, gemm_wgmma16, gridreduce, pointwise, pool, recurrent, rowwise, scan)
from tasks import load_task, materialize


# a wgmma conv reducing its tile in the epilogue: each module's plan_<family>, render, static_bytes, after, summary, how
EPILOGUE_CONVS = {"conv_rows": conv_rows, "conv_pooled": conv_pooled, "conv_stats": conv_stats}
WHOLE_K_EPILOGUES = {"conv_pooled", "conv_stats"}  # those whose epilogue also runs on the whole-K kernel (conv_short)
RNN_NAMES = {"lstm": "LSTM", "gru": "GRU", "tanh": "RNN (tanh)", "relu": "RNN (relu)"}


def family_of(g: OpGraph) -> str:
    kinds = {n.kind for n in g.nodes}
    if any(n.kind == "pw" and n.op == "flip" for n in g.nodes):
        raise Unsupported("aten::flip (the expert knows it only as flip-cumsum-flip, a reverse scan)")
    if "rnn" in kinds:
        return "recurrent"
    if "attention" in kinds:
        return "attention"
    if "conv" in kinds:
        return "conv"
    if "scan" in kinds:
        return "scan"
    if "pool" in kinds:
        return "pool"
    if "gemm" in kinds:
        return "gemm"
    if "reduce" in kinds:
        return "rows"
    if g.output.kind in ("input", "param"):
        raise Unsupported("the reference returns an input unchanged")
    return "pointwise"


def eager_is_fp32_grade(req: StageRequest | None) -> bool:
    """Eager's own error on this task was measured at fp32 grade (cuDNN ran an exact algorithm), so the
    float64 rule gives a TF32 candidate no room. An error of exactly 0 says nothing of the algorithm: the
    output does not depend on the conv's rounding (level 2 task 36's min, sum and GELU saturate to the bias,
    where 3xTF32 first cost 2.2 ms against eager's 1.5)."""
    a = req.analysis if req is not None else None
    return a is not None and eager_ran_tf32(a.eager_err, a.eager_exact_err) is False


DEFAULT_SMS = 132  # where no request names the GPU (a program's untuned stages): the H200's
DEFAULT_SMEM = 227 * 1024  # and its shared memory a block may opt into


def smem_limit(profile) -> int:
    """The shared memory a block may opt into on the GPU `profile` names (none: the H200's)."""
    return profile.shared_per_block_optin if profile is not None else DEFAULT_SMEM
MIN_SPLIT_K = 1024  # K a split-K range sums at least: shorter ranges cost more in partials than they gain
# A matmul of at most SMALL_M rows (a hand-written recurrence's step, a classifier head at batch 10) on 128-row tiles
# multiplies mostly padding: KernelBench level 3 task 34's step, 8 x 1280 by 1280 x 256, ran as two 128x128 tiles that
# took 110 us (H100, 2026-12-07). Tiles of 16 or 32 rows instead, K split in ranges of at least SMALL_M_K (the
# partials are small: M x N a range) across the SMs.
SMALL_M = 32
SMALL_M_K = 256
# Such a matmul streams its weights (VGG16's first classifier layer, 10 x 25088 by 25088 x 4096: 411 MB) and is bound
# by the bytes in flight: its 64 tiles split twice, one 2-warp block an SM, read at 650 GB/s (0.63 ms, H100,
# 2026-12-07). Split to fill SMALL_M_BLOCKS of those small blocks an SM instead (a 3-stage ring of 16x32 and 64x32
# tiles is 30 KB of shared memory).
SMALL_M_BLOCKS = 4
# Only where 128-wide tiles would number at most 4 along N (task 34's step: 2 tiles; 4x faster on narrow ones). Wider
# ones keep the 3xTF32 wgmma on planes: VGG16's 32-tile classifier layer took 0.630 ms on narrow tiles against 0.48,
# and ResNet-18's 2 x 512 by 512 x 1000 head on them failed the float64 rule on the H100 (norm-wise 0.17) while it
# matches a float64 truth on the CPU emulator: not understood yet (NOTES, twenty-third session)
SMALL_M_MAX_N = 512
# a 3xTF32 GEMM this short in K writes its output (4 bytes an element at 4.19 TB/s) slower than it computes
# it (6K tensor FLOPs an element at a few hundred TFLOP/s): KernelBench 7 (K = 64) and 9 (K = 32)
STORE_BOUND_K = 256
# Shorter still (one or two k-tiles: KernelBench 7 and 9), a 128x128 tile's 174-226 registers leave one block
# an SM, which loads, multiplies and then stores 64 KB with nothing beside it (task 9 at 0.85x eager on the
# H100): 64x64 tiles of 4 warps on a 2-stage ring (about 100-135 registers, 37 KB) let five share an SM
SHORT_K = 64
SHORT_K_TILE = {"BM": 64, "BN": 64, "WM": 2, "WN": 2, "stages": 2}


# From two k-tiles of 32 (K >= 64) the planes GEMM's warpgroup MMAs beat mma.sync's staged stores where the output
# bounds the time: KernelBench 7 (32768^2 x 64) 2.95 ms against 3.93 (eager 4.06), but not at one k-tile
# (task 9, K = 32: 2.51 against 2.27) on the H100 (2026-12-06, benchmarks/NOTES.md): the whole K in one fold
SHORT_PLANES_K = 64


def short_planes(plan) -> dict | None:
    """The planes GEMM for a store-bound fp32 GEMM of SHORT_PLANES_K <= K (<= STORE_BOUND_K), both sides at least
    a 256-wide: its whole K one fold (no k-tile of zeros past K); None where the planes do not take it."""
    if plan.K < SHORT_PLANES_K or min(plan.M, plan.N) < 256:
        return None
    d = {**PLANES, "fold": -(-plan.K // PLANES["BK"])}
    try:
        gemm_tf32.planes_check(plan, gemm.GemmKnobs.of(d))
    except Unsupported:
        return None
    return d


def output_tiles(plan, params: dict) -> int:
    """A GEMM's output tiles of BM x BN, over its batch."""
    return -(-plan.M // params["BM"]) * -(-plan.N // params["BN"]) * plan.batch


def split_k(plan, params: dict, sms: int) -> int:
    """K ranges for a 3xTF32 GEMM whose output tiles fill less than one wave of the GPU (KernelBench
    level 1 task 6: M = N = 256, K = 2^19 is 4 tiles of 128x128 for 132 SMs): enough ranges to fill
    it, each at least MIN_SPLIT_K long, the partials no larger than the operands they come from."""
    tiles = output_tiles(plan, params)
    if tiles >= sms or plan.K < 2 * MIN_SPLIT_K:
        return 1
    cap = max(1, min(-(-sms // tiles), plan.K // MIN_SPLIT_K,
                     (plan.M * plan.K + plan.K * plan.N) // max(1, plan.M * plan.N)))
    # time ~ waves of blocks / ranges: 128 tiles on 132 SMs gain nothing from 2 ranges (2 waves of
    # half-length blocks), 4 tiles gain 33x; split only where it saves at least a quarter
    waves = lambda s: -(-tiles * s // sms) / s  # noqa: E731
    best = min(range(1, cap + 1), key=lambda s: (waves(s), s))
    return best if waves(best) <= 0.75 * waves(1) else 1


def small_m_split(plan, params: dict, sms: int) -> int:
    """K ranges for a matmul of at most SMALL_M rows: its tiles times the ranges fill SMALL_M_BLOCKS blocks an SM,
    each range at least SMALL_M_K long (level 3 task 34's 8 x 1280 step: 4 tiles, 5 ranges)."""
    return max(1, min(plan.K // SMALL_M_K, -(-SMALL_M_BLOCKS * sms // output_tiles(plan, params))))


def narrow_design(plan, sms: int) -> dict:
    """A matmul of at most SMALL_M rows on tiles of 16 or 32 rows, K split across the SMs in ranges of SMALL_M_K."""
    d = {**MMA_SYNC, "BM": 16 if plan.M <= 16 else 32, "BN": 64 if plan.N >= 64 else 32, "WM": 1,
         "WN": 2 if plan.N >= 64 else 1}
    sk = small_m_split(plan, d, sms)
    return {**d, "splitk": sk} if sk > 1 else d


def clusters(profile) -> bool:
    """Thread-block clusters and distributed shared memory (compute capability 9.0 on); no profile: the H200."""
    return profile is None or profile.has("clusters")


def row_cluster(plan, profile) -> int:
    """Blocks of the smallest cluster whose shared memory holds a row one block's cannot (0: none): a
    block per row over a contiguous row of one input, read from memory once instead of once a pass."""
    smem = smem_limit(profile)
    if not clusters(profile) or rowwise.cluster_reason(plan) or plan.R * 4 <= smem:
        return 0
    return next((c for c in rowwise.CLUSTER_SIZES if rowwise.cluster_fits(plan, c, smem)), 0)


REGION_SHARE = 0.25  # a program's non-heavy kernel taking this share of its time is tuned too
# A program launches as one CUDA graph where the launches it saves (about 10 us of Python each) outweigh
# copying its inputs into the graph's buffers and its output out (16 MB move in about 8 us at 4 TB/s)
GRAPH_BYTES_PER_LAUNCH = 16 << 20


# The fp32 GEMM's first design where planes pay on a GPU with the warpgroup MMA: both operands split once
# into TF32 high and low planes, then 3xTF32 wgmma on 128-byte-swizzled tiles of K 32 (1.58 ms against
# mma.sync's 2.67 and eager's 2.75 at 4096^3 on the H200, 2026-12-05; unswizzled it ran 3.94)
PLANES = {"family": "gemm_tf32", "BM": 128, "BN": 128, "WM": 2, "WN": 4, "wgmma": True, "planes": True,
          "BK": 32, "stages": 3, "fold": 4, "swz": True, "tma": True}
MMA_SYNC = {"family": "gemm_tf32", "BM": 128, "BN": 128, "WM": 2, "WN": 4, "stages": 3}
# Where few row tiles read each B tile (a weight streamed by 128 rows: KernelBench's level 2 tasks 55, 56,
# 59, 68), B's planes would cost more traffic than the MMAs save: B is read raw into the ring and split in
# shared memory (gemm_tf32's `bsplit`), only A's planes in memory
BSPLIT = {**PLANES, "bsplit": True, "tma": False}
# Where both planes pay, B split in the ring saved B's split pass at 1024 rows against the cp.async planes (level 2
# task 12 1.86 ms against 2.03 on the H100, 2026-12-05), but not against the planes by TMA: at 2048 x 8192 x 4096
# B split in the ring ran 1.67 ms (level 1 tasks 17, 18) where the same shape's planes by TMA ran 1.20 (tasks 2,
# 16; d581a70). Each row tile splits B again, so only up to this many rows (a weight streamed by few row tiles)
BSPLIT_MAX_M = 512


def planes_design(plan) -> dict:
    """The planes GEMM's first design where planes pay: B split in the ring where it can be and rows are few."""
    return dict(BSPLIT) if gemm_tf32.bsplit_ok(plan) and plan.M <= BSPLIT_MAX_M else dict(PLANES)


# the 16-bit GEMM's designs: mma.sync (8% of cuBLAS on the H100 at 8192^3: 17.5 ms against 1.41), and the
# warpgroup MMA on staged, swizzled tiles fed by TMA from a producer warpgroup (gemm_wgmma16 `tma`: 128x256 on
# 4 stages 2.01 ms against cuBLAS's 1.38 on the H100, 2026-12-05; the cp.async ring 2.82, 128x128 on 5 2.43)
MMA16 = {"family": "gemm_tc", "BM": 64, "BN": 64, "WM": 2, "WN": 2, "stages": 1, "pad": 8}
WGMMA16 = {"family": "gemm_tc", "wgmma": True, "BM": 128, "BN": 128, "stages": 5, "tma": True}


def wgmma16_design(plan) -> dict:
    """The 16-bit warpgroup MMA's first tile: 256 columns where the GEMM has them; tiles copied straight
    from the tensors where both are K-contiguous (the staging pass is a read and a write of both)."""
    d = {**WGMMA16, "BN": 256, "stages": 4} if plan.N >= 256 else dict(WGMMA16)
    return {**d, "direct": True} if gemm_wgmma16.direct_ok(plan, d.get("tma", False)) else d


def wgmma16_fits(plan, profile) -> bool:
    """A 16-bit GEMM the warpgroup MMA takes (A row-major; B either way) and worth its staging pass."""
    return (wgmma_ok(profile) and plan.dtype in ("bfloat16", "float16") and plan.a_layout == "mk"
            and min(plan.M, plan.N) >= 128 and plan.K >= 64 and plan.batch <= 65535)


def wgmma_ok(profile) -> bool:
    """Hopper's warpgroup MMA (compute capability 9.0a); no profile: the H200."""
    return profile is None or profile.has("wgmma")


# The planes' cost model, from the H200 (2026-12-05, 4096^3): the planes GEMM at about 93 TFLOP/s, mma.sync's
# 3xTF32 at about 51 (eager's cuBLAS fp32 as fast); the split's extra traffic (a read of A and B, two writes,
# the second plane's read: 16 bytes an element of each) at about 4 TB/s
PLANES_TFLOPS, SYNC_TFLOPS, PLANES_TBS = 93.0, 51.0, 4.0
# B split in the ring: a second barrier and the split's shared-memory pass each k-step, taken (unmeasured:
# a guess until the first GPU run) as a fifth off the planes GEMM's rate
BSPLIT_TFLOPS = 75.0


def planes_pay(plan, params: dict) -> bool:
    """Whether the 3xTF32 GEMM's operands are worth splitting into planes first: whole-K GEMMs (no
    split-K) whose MMAs' time saved outweighs the split's traffic by a tenth (per k and batch entry, in
    picoseconds: 2MN flops, 16(M + N) bytes). Attention's 512 x 512 scores lose (the split costs what
    the faster MMAs save); 4096^2, KernelBench's (1024, 8192) linears and its (512, 2048) bmm win."""
    if params.get("splitk", 1) != 1 or min(plan.M, plan.N) < 256 or plan.K < 256:
        return False
    mn = plan.M * plan.N
    return 2 * mn / PLANES_TFLOPS + 16 * (plan.M + plan.N) / PLANES_TBS < 0.9 * 2 * mn / SYNC_TFLOPS


def bsplit_pays(plan, params: dict) -> bool:
    """Whether the weight-streaming variant (B split in the ring, A's planes only) beats mma.sync: whole-K
    GEMMs with B (N, K) whose faster MMAs outweigh A's split traffic (16 M bytes a k) by a tenth, where
    the planes of both do not already pay; at least 128 columns (a block's tile) and K 256."""
    if (params.get("splitk", 1) != 1 or not gemm_tf32.bsplit_ok(plan) or plan.N < 128 or plan.K < 256
            or planes_pay(plan, params)):
        return False
    mn = plan.M * plan.N
    return 2 * mn / BSPLIT_TFLOPS + 16 * plan.M / PLANES_TBS < 0.9 * 2 * mn / SYNC_TFLOPS


SHORT_ROW = 1024  # contiguous rows up to this long start a warp each (32 values a lane at most)
WARP_ROW = 4096  # and up to this long where there are rows for every warp the GPU holds


SPLIT_MIN_KTILES = 32  # a conv's K in 32-wide tiles past which its few pixels are split along K instead
SPLIT_WARPS_PER_SM = 8  # warps an SM the first tile should give before split-K is left out


def conv_tile(plan, d: dict, sms: int) -> dict:
    """The conv's first tile: 128 pixels a tile where that gives the GPU a wave of blocks, else smaller
    tiles down to 32 x 32 (a whole network's late convs at batch 2 are 98 pixels by 512 channels: four
    128-wide blocks on 132 SMs). The biggest tile that fills the GPU, or the one giving the most blocks;
    where that still leaves the SMs a few warps each and K is long (a late conv at batch 10: 490 pixels,
    K 4608), 64 x 64 tiles with K split into ranges instead (split-K: a second kernel sums them)."""
    best = _fill_tile(plan, d, sms)
    kt = -(-conv.gemm_k(plan, d["layout"]) // 32)
    warps = math.prod(conv.grid(plan, gemm.GemmKnobs(**best), d["layout"])) * best["WM"] * best["WN"] if best else 0
    if conv.split_ok(plan, d["layout"]) and kt >= SPLIT_MIN_KTILES and warps < SPLIT_WARPS_PER_SM * sms:
        bn = min(64, d["BN"])
        tile = {"BM": 64, "BN": bn, "WM": 2, "WN": max(1, bn // 32)}
        blocks = math.prod(conv.grid(plan, gemm.GemmKnobs(**tile), d["layout"]))
        ranges = min(-(-SPLIT_WARPS_PER_SM * sms // (blocks * tile["WM"] * tile["WN"])), kt // 8, 16)
        if ranges >= 2:
            return {**tile, "splitk": ranges}
    return best


def conv_wgmma(g, plan, d: dict, profile) -> dict | None:
    """The conv's first design on Hopper's warpgroup MMA, where its tiles are staged channels last in
    128-pixel tiles of plain TF32 (eager's cuDNN runs TF32 too): 128-byte-swizzled tiles, a 3-stage ring
    (two blocks an SM). On the H200 (2026-12-05) it ran level 2 task 1 in 3.33 ms against mma.sync's
    4.16 and eager's 4.05, level 1 task 63 in 9.01 against 11.95; 32 channels wide where a group has at
    most 32 and more than 16 (H200, 2026-12-06: level 1 task 78 2.38 ms against mma.sync's 4.17); None where the kernel
    cannot take the conv (the tile, the layout, split-K) or the GPU has no wgmma."""
    if not wgmma_ok(profile) or d.get("layout") != "nhwc" or d.get("split", 1) != 1 or d.get("splitk", 1) > 1 \
            or d["BM"] != 128 or d["BN"] not in (32, 64, 128):
        return None
    if d["BN"] == 32 and (plan.OCg <= 16 or plan.Cg % 4):  # measured where the tile is full and staged 16 bytes a piece
        return None
    return _conv_fits(g, plan, {**d, "wgmma": True, "swz": True, "stages": 3}, profile)


def _conv_fits(g, plan, d: dict, profile) -> dict | None:
    """The channels-last conv design `d` where its kernel renders and fits the GPU's shared memory, else None."""
    try:
        conv.render_fitting(g, plan, gemm.GemmKnobs.of(d), int(d.get("split", 1)), "nhwc", smem_limit(profile))
        return d
    except Unsupported:
        return None


def _definition(src: str, name: str) -> tuple[int, int]:
    """Where kernel `name` is defined in a template's source: from its `extern "C"` to the next one, or the end."""
    head = src.index(f" {name}(")
    b = src.find('extern "C"', head)
    return src.rindex('extern "C"', 0, head), b if b >= 0 else len(src)


def _channel_cat_parts(n) -> list | None:
    """The parts of a concatenation over dim 1 in order (torch.cat of several is a left-deep tree of pairs), else None."""
    if not (n.kind == "pw" and n.op == "cat" and n.args[2] == 1):
        return None
    parts = []
    for a in n.args[:2]:
        parts += _channel_cat_parts(a) or [a]
    return parts


def _reads(emitted: list) -> Counter:
    """How many launches of a program's emitted stages read each tensor, by name (a TMA kernel's through its maps too)."""
    return Counter(t.name for _, _, launches, _ in emitted for ln, _ in launches for t in [*ln.tensors, *(m.node for m in ln.maps)])


def _without_kernel(src: str, name: str) -> str:
    a, b = _definition(src, name)
    return src[:a] + src[b:]


def _staged_note(n: int) -> str:
    """What the description says of the `n` launches that read weights alone (host.weight_launches)."""
    return f"; {n} launch{'es' if n > 1 else ''} reading weights alone run once a weight version (egg.staged)" if n else ""


def _staging_launches(plan, planes: bool = False) -> list:
    """A channels-last conv's staging kernels (conv.staging) as launches, each with the node it writes."""
    return [(host.Launch(name, grid, block, reads, 0), writes)
            for name, grid, block, reads, writes in conv.staging(plan, planes)]


def on_mma_sync(d: dict) -> dict:
    """A conv design on mma.sync: the same knobs without the warpgroup MMA's (3xTF32 splits in registers there)."""
    return {k: v for k, v in d.items() if k not in ("wgmma", "swz", "planes", "fold", "tma", "persist", "pingpong")}


def tma_first(plan, d: dict, profile) -> dict:
    """A forward conv's plain-TF32 wgmma design `d` with its tiles by TMA and the persistent tile loop (conv_tma)
    where a tap's channels fill 32-channel boxes; else `d`. Measured on the H100 (2026-12-06, kernel_probe, conv
    kernel alone): level 2 task 1 1.53 ms against the cp.async ring's 2.16; task 4 4.56 against 4.72 (its epilogue,
    Mish twice, bounds it by instructions; ping-pong consumers 4.86). Transposed convs stay on the ring: its
    phases run their own taps' k-tiles, the TMA conv every phase over the largest's."""
    if not d.get("wgmma") or d.get("planes") or d.get("split", 1) != 1 or not conv_tma.first_for(plan):
        return d
    t = {**d, "tma": True, "persist": True, "stages": 4}
    k = gemm.GemmKnobs.of(t)
    try:
        conv_tma.check(plan, k)
    except Unsupported:
        return d
    return t if conv_tma.shared_bytes(plan, k) <= smem_limit(profile) else d


def conv_planes(g, plan, tf32: dict, profile) -> dict | None:
    """3xTF32 on the warpgroup MMA from TF32 planes staged once (conv `planes`), beside a plain-TF32 wgmma
    design `tf32`; None where that is on mma.sync or the planes' ring does not fit (twice the tiles)."""
    return _conv_fits(g, plan, {**tf32, "split": 3, "planes": True}, profile) if tf32.get("wgmma") else None


WHOLE_K_MAX = 96  # K the whole-K conv is offered at (3x3 over 8 channels is 72: three 32-wide k-tiles for the ring)


def whole_k(plan, split: int, profile) -> dict | None:
    """The whole-K conv design (conv_short) for a short-K forward conv: 128-pixel tiles by up to 64 channels
    where two blocks fit an SM; None where it does not apply or K is past WHOLE_K_MAX."""
    if conv_short.ok(plan) is not None or conv_short.kp(plan) > WHOLE_K_MAX or conv.pointwise(plan):
        return None  # (a 1x1 conv reads its input in place as a GEMM operand: staging would add a pass)
    bn = 64 if plan.OCg >= 48 else (32 if plan.OCg > 16 else 16)
    d = {"family": "conv", "layout": "nhwc", "split": split, "whole": True, "BM": 128, "BN": bn, "WM": 8 * 16 // bn,
         "WN": bn // 16}
    return d if conv_short.shared_bytes(plan, gemm.GemmKnobs.of(d)) <= smem_limit(profile) else None


def blocks_per_sm(fam: str, plan, d: dict, profile) -> int:
    """How many blocks of an epilogue conv's design `d` an SM holds by their shared memory (ring and epilogue)."""
    k, p = gemm.GemmKnobs.of(d), plan.conv
    per = conv.shared_bytes(p, k, "nhwc") + conv.static_bytes(p, k, "nhwc") + EPILOGUE_CONVS[fam].static_bytes(plan, k)
    return (profile.shared_per_sm if profile is not None else conv_short.SM_SHARED) // (per + 1024)  # 1 KB reserved a block


def epilogue_tile(fam: str, plan, d: dict, profile) -> dict:
    """An epilogue conv's design with 64-pixel tiles where the 128-pixel tile's ring leaves one block an SM and the
    64-pixel one two: with one, nothing overlaps a tile's loads, MMAs and epilogue (3xTF32 planes, 64 channels: level 2
    task 67's conv 4.03 -> 3.63 ms, 73's 0.90 -> 0.82 at 64 pixels on the H100; at 128 channels, one block either
    way, task 91's 3.85 -> 5.45)."""
    if d.get("BM") != 128 or blocks_per_sm(fam, plan, d, profile) > 1:
        return d
    half = {**d, "BM": 64}
    return half if blocks_per_sm(fam, plan, half, profile) > 1 else d


def fp32_grade(fam: str, plan, d: dict, profile) -> dict:
    """A conv design `d` at fp32 grade, for a program's untuned kernels where eager ran exact (the float64 rule then
    gives plain TF32 no room: KernelBench level 3 task 17's 1x1 expand conv over 6 channels, TF32 as a GEMM, missed
    it 65-fold where cuDNN summed the 6 products in fp32): few channels direct on the CUDA cores, else 3xTF32."""
    if fam in EPILOGUE_CONVS:
        return d if d.get("split", 1) == 3 else epilogue_tile(fam, plan, {**d, "split": 3, "planes": True}, profile)
    if fam != "conv" or d.get("split", 1) == 3 or d.get("algo") == "direct":
        return d
    if direct_conv.suits(plan):
        return {"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": direct_conv.channel_blocks(plan)[0]}
    return {**on_mma_sync(d), "split": 3}


def _fill_tile(plan, d: dict, sms: int) -> dict:
    tiles = [(128, d["BN"], d["WM"], d["WN"])] + [(bm, bn, 1 if bm == 32 else 2, max(1, bn // 32))
                                                   for bm, bn in ((64, d["BN"]), (64, 64), (32, 64), (32, 32))
                                                   if bn <= d["BN"]]
    best, most = {}, 0
    for bm, bn, wm, wn in tiles:
        try:
            blocks = math.prod(conv.grid(plan, gemm.GemmKnobs(BM=bm, BN=bn, WM=wm, WN=wn), d["layout"]))
        except Unsupported:
            continue
        if blocks > most:
            best, most = {"BM": bm, "BN": bn, "WM": wm, "WN": wn}, blocks
        if blocks >= sms:
            break
    return best


def row_cacheable(plan) -> bool:
    """The row program reads one input (its main) in every pass: worth keeping on chip."""
    return plan.main is not None and id(plan.main) in ancestors(plan.reductions[0].args[0])


def cols_rows(plan, profile) -> bool:
    """Strided rows (inner > 1) too few for a thread each to fill the GPU (under a quarter of its
    resident threads) and long enough to split among a block's warps: 32 rows a block (mapping cols)."""
    sms = profile.sms if profile is not None else DEFAULT_SMS
    tpsm = profile.max_threads_per_sm if profile is not None else 2048
    return plan.inner > 1 and plan.outer * plan.inner * 4 < sms * tpsm and plan.R >= 256


REWRITES = {"conv_sum": conv_sum.algorithm_flops, "gemm_sum": gemm_sum.algorithm_flops}


def graph_default(g: OpGraph, launches: int) -> bool:
    """Whether a program of `launches` kernels starts as one CUDA graph (GRAPH_BYTES_PER_LAUNCH)."""
    moved = sum(math.prod(n.shape) * {"float64": 8, "int64": 8, "bfloat16": 2, "float16": 2, "bool": 1}.get(n.dtype, 4)
                for n in g.inputs + [g.output])
    return launches >= 2 and moved <= launches * GRAPH_BYTES_PER_LAUNCH


def rewrite_flops(stages: list[tuple[str, object]]) -> float | None:
    """The FLOPs of the algebraic rewrites among (family, plan) stages, a lower bound of the kernel's
    arithmetic (the other stages' left out); None where no stage rewrites: the reference's FLOPs hold."""
    found = [REWRITES[f](p) for f, p in stages if f in REWRITES]
    return float(sum(found)) if found else None


def gemm_path(plan, params: dict) -> str:
    """Which GEMM kernel: "mma" (bf16/fp16 tensor cores), "tf32x3" (fp32 on tensor cores) or "simt" (fp32)."""
    if plan.dtype != "float32":
        return "mma"
    return "tf32x3" if params.get("family") == "gemm_tf32" else "simt"


UNIT_CHARS = 150_000  # a program's source past this is cut into compilation units of about this size
MAX_UNITS = 16  # (compiled in parallel: DenseNet-201's 2.2 MB took NVRTC 52 s on one core)
PRELUDES = (PRELUDE, WGMMA_PRELUDE, TF32_PRELUDE, BOOL_PRELUDE, CLUSTER_PRELUDE, gemm_wgmma16.TMA_PRELUDE, gemm_tf32.WGMMA_N32,
            gemm_tf32.PAIR_PRELUDE, gemm_tf32.MCAST_PRELUDE, gemm_tf32.NAMED_BAR_PRELUDE,
            *gemm_wgmma16.WGMMA16_PRELUDES.values(), *gemm_wgmma16.WGMMA16_TB_PRELUDES.values())


def join_units(srcs: list[str]) -> str:
    """A program's stage sources as one module source: consecutive stages grouped into up to MAX_UNITS
    compilation units of about UNIT_CHARS (state.MODULE_PART between them), each with the preludes its
    kernels use once."""
    total = sum(map(len, srcs))
    units = max(1, min(MAX_UNITS, total // UNIT_CHARS, len(srcs)))
    groups, size = [[]], 0
    for src in srcs:
        if groups[-1] and size >= total / units * len(groups) and len(groups) < units:
            groups.append([])
        groups[-1].append(src)
        size += len(src)
    out = []
    for group in groups:
        seen = []
        for src in group:
            for pre in PRELUDES:
                if pre in src and any(pre in s for s in seen):
                    src = src.replace(pre, "")
            seen.append(src)
        out.append("\n".join(seen))
    return ("\n" + MODULE_PART + "\n").join(out)


def _canonical(src: str, leaves: list) -> str:
    """A kernel source with its tensors' names (egg_mid3, p_layer1_0_conv1_weight, ...) as their positions
    among the stage's inputs: two stages whose kernels differ in nothing else are one kernel launched
    twice (arguments are positional)."""
    for k, n in enumerate(leaves):
        src = re.sub(rf"\b{re.escape(n.name)}\b", f"egg_leaf{k}", src)
    return src


class ExpertAgent:
    name = "expert"

    def __init__(self):
        self._graphs: dict[str, OpGraph | Unsupported] = {}
        self._failed: dict = {}  # graph structure -> (depth, why): programs' rests found unplannable
        self._plans: dict[tuple, tuple | Unsupported] = {}  # (task file, wgmma) -> (family, plan)
        self.wgmma = True  # the GPU has Hopper's warpgroup MMA (families that only it runs are planned)

    def graph(self, path: str) -> OpGraph:
        if path not in self._graphs:
            try:
                self._graphs[path] = attention.fuse(export_graph(load_task(path)))  # softmax(Q K^T) V as one node
            except Unsupported as exc:
                self._graphs[path] = exc
        g = self._graphs[path]
        if isinstance(g, Unsupported):
            raise g
        return g

    def _plan(self, path: str, profile=None):
        g = self.graph(path)
        if wgmma_ok(profile) != self.wgmma:  # what a graph's rest could not be planned into may differ
            self.wgmma, self._failed = wgmma_ok(profile), {}
        key = (path, self.wgmma)
        if key not in self._plans:  # planned once a task: a whole network's plan takes seconds, and every stage asks
            # a program's planner recurses once a kernel (three frames each): a whole network's hundreds
            sys.setrecursionlimit(max(sys.getrecursionlimit(), 8 * program.MAX_STAGES))
            try:
                self._plans[key] = self.plan_graph(g)
            except Unsupported as exc:
                self._plans[key] = exc
        got = self._plans[key]
        if isinstance(got, Unsupported):
            raise got
        return (g, *got)

    def plan_graph(self, g: OpGraph, single: bool = False, depth: int = 0):
        """(family, plan) of an op graph; one that one kernel cannot finish becomes a program of several
        (unless `single`)."""
        fam = family_of(g)
        try:
            if fam == "rows":  # planned once; rows too few and too long go to the grid-level template
                rp = rowwise.plan_rows(g, grid_ok=True)
                if rowwise.needs_grid(rp.outer, rp.R, rp.inner, rp.seg):
                    return "grid", gridreduce.check_grid(rp)
                return fam, rp
            return fam, {"gemm": gemm.plan_gemm, "scan": scan.plan_scan, "pool": pool.plan_pool,
                         "conv": conv.plan_conv, "recurrent": recurrent.plan_rnn,
                         "attention": attention.plan_attention}.get(fam, lambda _: None)(g)
        except Unsupported:
            if fam == "gemm":
                try:  # a matmul only summed over its columns: a matrix-vector product with the weight's column sums
                    return "gemm_sum", gemm_sum.plan_gemm_sum(g)
                except Unsupported:
                    pass
            if fam == "conv":
                try:  # a conv only summed over its positions: from the input's box sums, no conv output
                    return "conv_sum", conv_sum.plan_conv_sum(g)
                except Unsupported:
                    pass
                # a conv whose channels are reduced right after it, summed over its positions after a chain no box
                # sum takes, or followed by a training-mode BatchNorm: the reduction in its wgmma epilogue
                for ef, mod in (EPILOGUE_CONVS.items() if self.wgmma else ()):
                    try:
                        return ef, getattr(mod, f"plan_{ef}")(g)  # plan_conv_rows, plan_conv_pooled, plan_conv_stats
                    except Unsupported:
                        pass
                try:
                    p = conv.plan_conv(g, narrow_ok=True)
                except Unsupported:
                    p = None
                if p is not None and p.OCg < conv.MIN_GROUP_CHANNELS and not p.transposed:
                    return "direct_conv", p
            if single or not program.candidates(g):
                raise
            return "program", program.plan_program(g, self.plan_graph, depth, self._failed)

    def precheck(self, path: str) -> str | None:
        """Why the expert cannot cover this task (None when it can): asked before baselines are timed."""
        try:
            self._plan(path)
        except Unsupported as exc:
            return str(exc)
        except Exception as exc:  # a bug of ours on an unusual reference: a clear per-task result, not a crash
            return f"the expert agent failed on this reference ({type(exc).__name__}: {str(exc)[:120]})"
        return None

    # -- the stage entry point --------------------------------------------------------
    def propose(self, req: StageRequest) -> Proposal:
        try:
            g, fam, plan = self._plan(materialize(req.task), req.profile)
            variants = self._variants(req, fam, g, plan)
            why = ""
            if req.stage != "algorithm_design" and req.params_override is None:
                variants, why = advice.order(plan.stages()[plan.tuned][1] if fam == "program" else fam, req.stage, variants,
                                             req.best_profile)
        except Unsupported as exc:
            return Proposal(unsupported=str(exc))
        except Exception as exc:
            return Proposal(unsupported=f"the expert agent failed on this reference ({type(exc).__name__}: {str(exc)[:120]})")
        tried = {tuple(sorted(a.params.items())) for a in req.attempts}
        if req.best is not None:
            tried.add(tuple(sorted(req.best.params.items())))
        kernels, broke = [], None
        for params in variants:
            if tuple(sorted(params.items())) in tried or len(kernels) >= req.max_candidates:
                continue
            try:
                kernels.append(self.emit(g, fam, plan, params, req.profile))
            except Unsupported:
                continue  # a knob combination the template cannot express
            except Exception as exc:  # a bug of ours on this task: a clear result, not a crashed run
                broke = broke or f"the expert agent failed emitting {fam} ({type(exc).__name__}: {str(exc)[:120]})"
                continue
            tried.add(tuple(sorted(params.items())))
        if not kernels and broke:
            return Proposal(unsupported=broke)
        text = self._plan_text(g, fam, plan, req)
        if req.best_profile is not None:
            text += f" Profile of the input: {req.best_profile.summary()}." + (f" So: {why}." if why else "")
        return Proposal(kernels=kernels, plan=text)

    def _plan_text(self, g, fam, plan, req) -> str:
        if fam == "program":
            st = plan.stages()
            parts = [self._plan_text(sg, f, p, req).split(" Plan: ", 1) for sg, f, p, _ in st]
            steps = [f"{i + 1}) {t[1].rstrip('.')}" + (f", writing a {tuple(w.shape)} tensor once" if i < len(st) - 1 else "")
                     for i, (t, (_, _, _, w)) in enumerate(zip(parts, st))]
            ops = self._plan_text(g, "pointwise", None, req).split(" Plan: ", 1)[0]
            return f"{ops} Plan: {len(st)} kernels. " + "; ".join(steps) + "."
        ops = " -> ".join(dict.fromkeys(o.removeprefix("aten::") for o in g.aten_ops)) or "identity"
        bound = req.analysis.roofline.bound if req.analysis else "unknown"
        if fam == "grid":
            how = (f"a grid-level reduction: {plan.outer} row(s) of {plan.R} elements split over many blocks, "
                   f"{len(plan.reductions)} reduction pass(es) [{', '.join(r.op for r in plan.reductions)}] with a fold "
                   f"each{', then a full-size output pass' if plan.full_output else ''}; no atomics")
        elif fam == "pool":
            a = plan.pool.attrs
            mapping = ("a block an output row reducing input columns" if pool.default_cols(g, plan)
                       else "each thread one or more outputs, their windows' inputs loaded once")
            how = (f"{a['kind']} pooling over {plan.nd} dim(s) (kernel {a['kernel']}, stride {a['stride']}, padding "
                   f"{a['padding']}), {mapping}, the pointwise chain before and after it fused")
        elif fam == "recurrent":
            what = f"{RNN_NAMES[plan.cell]} recurrence{' writing its cell state' if plan.emits_c else ''}"
            walk = " both ways at once (a bidirectional layer)" if plan.pair else " backwards" if plan.reverse else ""
            how = (f"a{'n' if plan.cell == 'lstm' else ''} {what} over {plan.T} steps{walk}: "
                   f"a persistent block per batch element ({plan.B}), the state in shared memory, a warp per gate row "
                   f"of W_hh ({plan.G * plan.H} x {plan.H}) each step")
        elif fam == "attention":
            how = (f"attention over {plan.n} (batch x heads) of {plan.L} queries and {plan.S} keys (head dims {plan.E}, "
                   f"{plan.Ev}) in one kernel: Q K^T on 3xTF32 MMAs, the score chain and "
                   f"{'an online softmax' if plan.node.op == 'softmax' else 'the elementwise weights'} in registers, "
                   f"then P V; the scores never written")
        elif fam == "scan":
            how = (f"a {'reverse ' if plan.scan.reverse else ''}{plan.scan.op} over (outer={plan.outer}, L={plan.L}, "
                   f"inner={plan.inner}), the pointwise chain before and after it fused")
        elif fam == "pointwise":
            how = "one fused pointwise kernel, one pass over the output"
        elif fam == "conv_sum":
            how = (f"the conv{plan.conv.nd}d's sum over its {math.prod(plan.conv.out_sp)} output positions without the conv: "
                   f"each input plane summed over the box each of the {plan.taps} taps reaches, then a thread per "
                   f"(image, channel) contracting those sums with the weight, the chain after the sum fused (exact fp32)")
        elif fam == "gemm_sum":
            q = plan.gemm
            how = (f"the ({q.M} x {q.K}) @ ({q.K} x {q.N}) matmul's sum over its {q.N} columns without the matmul: "
                   f"the weight summed over its columns once (one read), then a warp per row of A taking the dot "
                   f"product with those sums, the chain after the sum fused (exact fp32, memory-bound)")
        elif fam in EPILOGUE_CONVS:
            p = plan.conv
            how = (f"conv{p.nd}d as an implicit GEMM (M={p.Mg} pixels{' a phase' if p.phased else ''}, N={p.OC} channels, "
                   f"K={p.Kg}) on the warpgroup MMA" + (" (short K: the whole-K kernel on mma.sync)"
                                                         if fam in WHOLE_K_EPILOGUES and whole_k(p, 1, None) else "")
                   + ", " + EPILOGUE_CONVS[fam].how(plan))
        elif fam == "direct_conv":
            how = (f"a direct conv{plan.nd}d ({plan.groups} group(s) of {plan.OCg} output channel(s)): a thread per "
                   f"output sums {plan.Cg} channel(s) over the {plan.ker} window, the pointwise chain fused")
        elif fam == "conv":
            how = (f"conv{plan.nd}d as an implicit GEMM per group (M={plan.M} output pixels, N={plan.OCg} channels, "
                   f"K={plan.K}), input gathered on the fly, tensor cores (TF32 as eager's cuDNN, or 3xTF32), "
                   f"the pointwise chain fused into the store")
        elif fam == "rows":
            how = (f"a row program over (outer={plan.outer}, R={plan.R}, inner={plan.inner}) with "
                   f"{len(plan.reductions)} reduction pass(es) [{', '.join(r.op for r in plan.reductions)}]"
                   f"{' and a final write pass' if plan.full_output else ''}")
        else:
            how = (f"GEMM M={plan.M} N={plan.N} K={plan.K} batch={plan.batch} ({plan.dtype}, "
                   f"{'tensor cores mma.sync' if plan.dtype != 'float32' else '3xTF32 tensor cores, or SIMT fp32'}) with the "
                   f"pointwise epilogue fused into the store")
        return f"ops: {ops}. {bound}-bound. Plan: {how}."

    # -- knobs per stage ----------------------------------------------------------------
    def _variants(self, req: StageRequest, fam: str, g: OpGraph, plan) -> list[dict]:
        if fam == "program":  # the stages tune the heavy kernel, and the slowest other kernel where it takes
            # REGION_SHARE of the time or more (first where it took more than the heavy one)
            sg, f, p, _ = plan.stages()[plan.tuned]
            out = self._variants(req, f, sg, p)
            auto = graph_default(g, len(plan.stages()))
            out = [v if "graph" in v else {**v, "graph": auto} for v in out]
            if eager_is_fp32_grade(req):  # every kernel of the program at fp32 grade, the untuned ones too
                out = [{**v, "fp32": True} for v in out]
            if req.stage == "memory_optimization" and req.best is not None and req.params_override is None:
                # whether the graph pays is measured, not assumed: the other launch mode of the best
                out.insert(0, {**req.best.params, "graph": not req.best.params.get("graph", auto)})
            per = self._stage_ms(req, plan) if req.stage != "algorithm_design" else None
            others = [(ms, i) for i, ms in enumerate(per or []) if i != plan.tuned]
            if others and (top := max(others))[0] >= REGION_SHARE * sum(per):
                region = self._region_variants(req, plan, top[1])
                out = region + out if top[0] > per[plan.tuned] else out + region
            return out
        base = dict(req.best.params) if req.best is not None else {}
        st = req.stage
        kn = principles.knobs(st)
        out: list[dict] = []
        if req.params_override is not None:  # a reviewer's edit
            start = base or self._default(fam, g, plan, req)
            return [{**start, **p} for p in req.params_override]
        if st == "algorithm_design":
            if fam == "gemm" and plan.dtype == "float32":  # both algorithms: tensor cores first
                return [self._default(fam, g, plan, req), self._simt_default()]
            if fam == "gemm" and wgmma16_fits(plan, req.profile):  # 16-bit: the warpgroup MMA, and mma.sync beside it
                return [wgmma16_design(plan), dict(MMA16)]
            if fam in EPILOGUE_CONVS:  # plain TF32 and 3xTF32 on staged planes (fp32 grade: first where
                # eager was exact)
                tf32 = self._default(fam, g, plan, req)
                both = [epilogue_tile(fam, plan, d, req.profile) for d in (tf32, {**tf32, "split": 3, "planes": True})]
                both = both[::-1] if eager_is_fp32_grade(req) else both
                if fam in WHOLE_K_EPILOGUES and (whole := whole_k(plan.conv, both[0].get("split", 1), req.profile)):
                    # short K: first on the whole-K persistent kernel, the next tile's gather under this one's
                    # epilogue (the wgmma ring held one block an SM: task 67's conv 3.93 ms on the H100, where the
                    # plain family's whole-K kernel ran the same conv at a quarter of the pixels, output written, in 0.58)
                    both.insert(0, {**whole, "family": fam})
                return both
            if fam == "conv":  # plain TF32 (what eager's cuDNN runs by default) and 3xTF32 (fp32 grade); the
                # fp32-grade one first where eager was measured exact here (cuDNN's choice for many shapes)
                tf32 = self._default(fam, g, plan, req)
                both = [tma_first(plan, tf32, req.profile), {**on_mma_sync(tf32), "split": 3}]  # 3xTF32 on mma.sync (split in registers)
                both = both[::-1] if eager_is_fp32_grade(req) else both
                if planes := conv_planes(g, plan, tf32, req.profile):  # and on the warpgroup MMA from staged planes,
                    # last: slower than mma.sync's on the H100 (level 2 task 57 1.32 ms against 1.06, 87 6.75 against
                    # 5.21, 90 8.00 against 6.88: K of 72-216, the planes' staging and a ring twice the size)
                    both.append(planes)
                if direct_conv.suits(plan):  # few channels: exact fp32 on the CUDA cores, a block of channels a thread;
                    # first where the input cannot be staged channels last (channels a group not a multiple of 4: the
                    # implicit GEMM gathers 4 bytes a piece). Measured on the H200 (RESULTS.md, 2026-12-04): it was
                    # chosen on every such task (level 1 54 59, level 2 6 23 24 27 48 79 83: 1.3-2.9x eager) where
                    # the first candidates at da39c3f (3xTF32 or TF32 mma.sync in place) ran 0.5-0.7x
                    direct = {"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": direct_conv.channel_blocks(plan)[0]}
                    both.insert(0 if tf32.get("layout") == "nchw" else 1, direct)
                if whole := whole_k(plan, both[0].get("split", 1), req.profile):  # short K: first at 3xTF32 (H200, level 2
                    # task 57 0.81 ms against the ring's 1.10, task 65 8.22 against 9.88); at TF32 second (57: 0.75 against
                    # the wgmma ring's 0.71)
                    both.insert(0 if both[0].get("split") == 3 else 1, whole)
                if (pp := conv.padded(plan)) is not None:  # few channels not in fours: the same designs staged with
                    # the channels padded (16 bytes a tap, the warpgroup MMA). Not yet measured: first at plain TF32
                    # only where the direct conv does not suit (SqueezeNet's and AlexNet's 96 channels), after it
                    # where it does (measured), last at fp32 grade
                    pads = [{**d, "cpad": True} for d in self._variants(req, fam, g, pp) if d.get("algo") != "direct"]
                    at = len(both) if eager_is_fp32_grade(req) else int(both[0].get("algo") == "direct")
                    both[at:at] = pads
                return both
            return [self._default(fam, g, plan, req)]
        if fam == "pointwise":
            if st == "parallel_mapping":
                out = [{**base, "block": b} for b in kn["pointwise_block"]]
            elif st == "tiling":
                out = [{**base, "items": i, "waves": w} for i in kn["pointwise_items"] for w in kn["pointwise_waves"]]
            elif st == "memory_optimization":
                # each width both as a thread per vector over the whole grid (the copy kernel's shape) and as a
                # grid-stride loop over a few waves
                vecs = sorted({v or pointwise.vec_width(g.output.dtype) for v in kn["pointwise_vec"]}, reverse=True)
                out = [{**base, "vec": v, **extra} for v in vecs for extra in ({}, {"items": 1, "waves": 0}, {"waves": 4})]
        elif fam == "grid":
            if st == "parallel_mapping":
                out = [{**base, "block": b} for b in kn.get("grid_block", [128, 512, 1024])]
            elif st == "tiling":
                out = [{**base, "parts": n} for n in kn.get("grid_parts", [528, 2112, 4224])]
            elif st == "memory_optimization":
                if gridreduce.welford_pairs_of(plan, base):  # two reads for the variance, should Welford's divides cost more
                    out = [{**base, "welford": False}]
                if base.get("vec", 1) > 1:  # the scalar passes, measured beside the vectors
                    out.append({**base, "vec": 1})
        elif fam == "pool":
            if st == "parallel_mapping":  # (outputs staged only where the block's still fit and are one run)
                out = [pool.fit_stage(plan, {**base, "block": b}) for b in kn.get("pool_block", [128, 512, 1024])]
            elif st == "tiling":
                out = [{**base, "waves": w} for w in kn.get("pool_waves", [0, 4, 16])]
            elif st == "memory_optimization" and base.get("cols"):  # the per-output mappings beside the cols one
                out = [{**{q: w for q, w in base.items() if q != "cols"}, "block": 256, "vec": v} for v in (1, 4)
                       if pool.window_span(plan, v) <= pool.MAX_WINDOW_REGS and plan.out[-1] >= v]
            elif st == "memory_optimization":  # outputs a thread along the last pooled dim, windows in registers
                out = [{**base, "vec": v, **({"ostage": False} if v == 1 else {})} for v in kn.get("pool_vec", [1, 2, 4, 8])
                       if v != base.get("vec", 1) and pool.window_span(plan, v) <= pool.MAX_WINDOW_REGS and plan.out[-1] >= v]
                kb = pool.PoolKnobs.of(base)
                if kb.vec > 1 and (kb.ostage or pool.stage_ok(plan, kb)):  # its outputs stored by consecutive
                    out.insert(0, {**base, "ostage": not kb.ostage})  # threads through shared memory (or not)
                for r in ((1, 2, 4, 8) if plan.nd > 1 else ()):  # output rows a thread, each input row loaded once for them
                    if r != kb.rows and plan.out[-2] >= r and pool.rows_span(plan, r) < r * plan.pool.attrs["kernel"][-2]:
                        out.append(pool.fit_stage(plan, {**base, "rows": r}))
                if pool.cols_ok(plan):  # a block an output row reducing columns
                    out.append({"family": "pool", "block": pool.cols_block(g, plan), "waves": 8, "cols": True})
        elif fam == "direct_conv":
            if st == "parallel_mapping":
                out = [{**base, "block": b} for b in kn.get("pool_block", [128, 512, 1024])]
            elif st == "tiling":
                out = [{**base, "waves": w} for w in kn.get("pool_waves", [0, 4, 16])]
        elif fam in REWRITES:  # no knobs: their kernels read at the copy's speed as designed
            out = []
        elif fam in EPILOGUE_CONVS and not base.get("whole"):  # the other tile height (half or twice the blocks),
            # then the ring's knobs
            if st == "parallel_mapping":
                out = [{**base, "BM": 192 - base["BM"]}]
            elif st == "memory_optimization":
                out = [{**base, "stages": 4}, {**base, "lead": not base.get("lead", False)},
                       {**base, "swz": not base.get("swz", False)}]
        elif fam == "conv" and base.get("algo") == "direct":
            if st == "parallel_mapping":
                out = [{**base, "block": b} for b in (128, 512) if b != base.get("block")]
            elif st == "tiling":  # the other channel blocks, and a thread per output with no grid-stride loop
                out = [{**base, "ocb": b} for b in direct_conv.channel_blocks(plan)[:3] if b != base.get("ocb")]
                out.append({**base, "waves": 0 if base.get("waves") else 8})
        elif (fam == "conv" or fam in WHOLE_K_EPILOGUES) and base.get("whole"):  # the whole-K conv: its warp shapes,
            # then half the pixels a tile (twice the blocks an SM where shared memory allows); the ring's designs are
            # other algorithms
            def shapes(bm):  # warps (WM, WN) of 8 whose warp tiles are whole MMA tiles
                return [(wm, 8 // wm) for wm in (1, 2, 4, 8) if bm % (16 * wm) == 0 and base["BN"] % (8 * (8 // wm)) == 0]
            if st == "parallel_mapping":
                out = [{**base, "WM": wm, "WN": wn} for wm, wn in shapes(base["BM"]) if (wm, wn) != (base["WM"], base["WN"])]
            elif st == "tiling" and base["BM"] == 128 and (sh := shapes(64)):
                wm, wn = min(sh, key=lambda s: abs(s[0] - base["WM"] // 2))
                out = [{**base, "BM": 64, "WM": wm, "WN": wn}]
        elif fam == "conv":
            if base.get("cpad"):  # the padded channels' knobs are those of the padded conv
                plan = conv.padded(plan) or plan
            if st == "parallel_mapping" and base.get("wgmma"):  # mma.sync, and its warp shapes, beside it
                sync = on_mma_sync(base)
                out = [sync] + [{**sync, "WM": wm, "WN": wn} for wm, wn in kn["gemm_tf32_warps"]]
                out.append({**base, "BN": 192 - base["BN"]} if plan.OCg > 64 else {**base, "stages": 4})
            elif st == "parallel_mapping":  # the warp shapes, then Hopper's warpgroup MMA where tiles are staged
                # channels last (first where conv_wgmma takes the conv)
                # (32 wide first where a group has at most 32 output channels: a 64-wide tile multiplies half zeros)
                wg = [{**base, "wgmma": True, "swz": True, "BM": 128, "BN": bn, "stages": 3} for bn in (32, 128, 64)
                      if base.get("layout") == "nhwc" and base.get("split", 1) == 1
                      and (bn == 64 or bn == 128 and plan.OCg > 64 or bn == 32 and plan.OCg <= 32)]
                out = [{**base, "WM": wm, "WN": wn} for wm, wn in kn["gemm_tf32_warps"]] + wg
                if base.get("splitk", 1) > 1:  # the measured alternative: the same tile without split-K, then twice the ranges
                    out = [{**base, "splitk": 1}, {**base, "splitk": 2 * base["splitk"]}] + out
                elif conv.split_ok(plan, lay := base.get("layout", "nchw")) and conv.gemm_k(plan, lay) >= 32 * SPLIT_MIN_KTILES \
                        and math.prod(conv.grid(plan, gemm.GemmKnobs(BM=base["BM"], BN=base["BN"]), lay)) < 4 * req.profile.sms:
                    out.append({**base, "splitk": 4})  # few tiles, long K
            elif st == "tiling":
                out = [{**base, "BM": bm, "BN": bn} for bm, bn in kn["gemm_tf32_tiles"]]
            elif st == "memory_optimization" and base.get("tma") and base.get("persist"):
                # from the TMA conv's persistent loop (the first design where a tap's channels fill a box): the cp.async
                # ring it replaced, its consumers in ping-pong (H100, level 2 task 1: 1.64 ms against 1.53; it may pay
                # where the epilogue is light against a long K), a stage more and less
                ring = {k: v for k, v in base.items() if k not in ("tma", "persist", "pingpong")}
                tma = [{**base, "pingpong": not base.get("pingpong", False), "stages": 6}] if base.get("BM") == 128 else []
                tma += [{**base, "stages": base.get("stages", 4) + d} for d in (1, -1)]
                out = [{**ring, "stages": 3}] + [d for d in tma if d["stages"] >= 2 and conv_tma.shared_bytes(
                    plan, gemm.GemmKnobs.of(d)) <= smem_limit(req.profile)]
            elif st == "memory_optimization":  # the ring's depth, and the other layout (staging vs in place)
                out = [{**base, "stages": s} for s in kn["gemm_tf32_stages"] if (s >= 3 or not base.get("wgmma"))
                       and conv.shared_bytes(plan, gemm.GemmKnobs.of({**base, "stages": s}), base.get("layout", "nchw"))
                       <= smem_limit(req.profile)]
                if base.get("wgmma"):  # first: the ring a tile further ahead (wg_ring), the swizzle toggled
                    out[:0] = [{**base, "lead": not base.get("lead", False)}, {**base, "swz": not base.get("swz", False)}]
                    if conv_tma.ok(plan) is None and not base.get("tma") and not base.get("planes") and base.get("BM") in (64, 128):
                        # tiles by TMA (conv_tma), then its persistent tile loop: first where a tap's channels fill a
                        # 32-channel box (fewer are zero-filled: up to 4x the MMAs of the gather's dense K), else last.
                        # Offered, not first: slower than the gather on the H100 but persistent on a transposed conv
                        # (RESULTS.md, 2026-12-05: level 2 task 4 10.8 ms against 9.3; task 16 4.79 against 5.12)
                        tma = {**base, "tma": True, "stages": 4}
                        at = 0 if plan.Cg >= gemm_tf32.BK else len(out)
                        out[at:at] = [tma, {**tma, "persist": True}]
                    elif base.get("tma") and not base.get("persist"):
                        out.insert(0, {**base, "persist": True})
                out += [{**base, "ldm": True}] + [{**base, "layout": lay} for lay in conv.LAYOUTS if lay != base.get("layout", "nchw")]
        elif fam == "attention":
            if st == "memory_optimization":  # the tile copies a tile ahead (cp.async ring) or one tile at a time
                out = [{**base, "ring": not base.get("ring", True)}]
        elif fam == "recurrent":
            if st == "parallel_mapping":  # threads a block; with clusters, also half the cluster, no cluster, the other
                # product layout
                out = [{**base, "block": b} for b in (256, 512, 1024) if b != base["block"]]
                if base.get("cluster"):
                    out += [{**base, "cluster": base["cluster"] // 2}, {**base, "cluster": 0, "kchunk": False},
                            {**base, "kchunk": not base.get("kchunk"), "block": 512 if base.get("kchunk") else 256}]
        elif fam == "scan":
            if st == "parallel_mapping":
                out = [{**base, "block": b} for b in kn.get("scan_block", [128, 256, 512, 1024])]
            elif st == "tiling":
                out = [{**base, "items": i} for i in kn.get("scan_items", [4, 8, 16])] if plan.inner == 1 else []
            elif st == "memory_optimization":
                out = [{**base, "waves": w} for w in kn.get("scan_waves", [4, 16])]
        elif fam == "rows":
            if st == "parallel_mapping":
                if plan.seg:  # a segmented row: a block each, of other sizes
                    out = [{**base, "block": b} for b in (128, 256, 512, 1024) if b != base.get("block")]
                elif plan.inner > 1:
                    tc = [{**base, "mapping": "tcols", "block": b, "split": sp} for b, sp in ((256, False), (512, False), (256, True), (512, True))]
                    out = ([d for d in tc if not (base.get("mapping") == "tcols" and d["block"] == base["block"]
                                                  and d["split"] == base.get("split", False))]
                           if colreduce.reason(g, plan) is None else [])
                    out += [{**base, "mapping": "thread", "block": b} for b in (128, 256)] + \
                          [{**base, "mapping": "cols", "block": b} for b in (256, 1024) if plan.R >= b // 32] + \
                          [{**base, "mapping": "block", "block": 256}]
                    if base.get("mapping") == "cols":  # the cols block sizes first
                        out.sort(key=lambda d: d["mapping"] != "cols")
                else:
                    out = [{**base, "mapping": "block", "block": b} for b in kn["row_block"]
                           if b <= max(128, 1 << math.ceil(math.log2(max(plan.R, 32))))]
                    out += [{**base, "mapping": "warp", "block": b, **({"cache": "none", "waves": 8} if base.get("cluster") else {})}
                            for b in kn["warp_row_block"]]
            elif st == "tiling":
                out = [{**base, "waves": w} for w in kn["row_waves"]]
            elif st == "memory_optimization":
                out = [{**base, "cache": c} for c in kn["row_cache"]] if base.get("mapping") == "block" else []
                if base.get("mapping") == "thread" and row_cacheable(plan):  # a thread's row in registers, shared memory or neither
                    if plan.R <= rowwise.THREAD_REGS:
                        out.append({**base, "cache": "none" if base.get("cache") == "regs" else "regs"})
                    elif base.get("cache") == "none" and rowwise.shared_bytes(
                            plan, rowwise.RowKnobs(mapping="thread", block=128, cache="smem")) <= rowwise.THREAD_SMEM:
                        out.append({**base, "cache": "smem", "block": 128, "online": False, "welford": False})
                if rowwise.welford_pairs(plan):  # the two-pass variance, should Welford's divides cost more (or the other way)
                    out.append({**base, "welford": not base.get("welford", True)})
                if plan.inner == 1:  # a register-resident row needs a block big enough: try the larger blocks too
                    out += [{**base, "cache": "regs", "block": b} for b in (512, 1024) if b != base.get("block")]
                if rowwise.online_pairs(plan):  # last: max, then the sum of exps, two passes but no rescaling (or one pass)
                    out.append({**base, "online": not base.get("online", True)})
                if plan.inner == 1:  # the other read width of the main input
                    out.append({**base, "cache": "none", "vec": 1 if base.get("vec", 1) == 4 else 4})
                if (C := row_cluster(plan, req.profile)) and base.get("cache") != "cluster":  # the row across a cluster
                    # (its slices by a ring of bulk copies, `ring`, verified but slower still on the H100, 2026-12-07:
                    # task 23 10.4 ms plain and 14.7 online against the stream's 6.7; task 34 11.1-13.8 against 7.8)
                    out.insert(0, {**base, "mapping": "block", "block": 1024, "cache": "cluster", "cluster": C, "waves": 1})
        elif base.get("stream"):  # a few rows streaming the weights: warps and rows a warp, the K ranges; the tiles
            if st == "parallel_mapping":  # (narrow, then 128-row 3xTF32 split 4 ways, VGG16's 0.48 ms) as alternatives
                out = [{**base, "TN": 2}, {**base, "WN": 4}, narrow_design(plan, req.profile.sms), {**MMA_SYNC, "splitk": 4}]
            elif st == "tiling":
                sk = base.get("splitk", 1)
                out = [{**base, "splitk": s} for s in (2 * sk, max(1, sk // 2)) if s != sk]
        else:
            path = gemm_path(plan, base)
            tk = "gemm_tf32" if path == "tf32x3" else "gemm_tc"
            if path == "mma" and base.get("wgmma"):  # the 16-bit warpgroup MMA: tile width, then the ring's depth
                other = {"BN": 128, "stages": 4} if base.get("BN") == 256 else {"BN": 256, "stages": 3}
                # from the TMA ring (the first design): its persistent loop, then the cp.async ring; from the
                # cp.async ring: TMA and its persistent loop
                t = {**base, "tma": True, "stages": 4 if base.get("BN") == 256 else 5}
                ring = {**base, "tma": False, "persist": False, "stages": 3 if base.get("BN") == 256 else 4,  # cp.async's
                        "direct": base.get("direct", False) and gemm_wgmma16.direct_ok(plan)}  # (B (K, N) staged there)
                tma = ([] if base.get("BM", 128) not in (64, 128) else
                       [{**base, "persist": True}, ring] if base.get("tma") and not base.get("persist") else
                       [ring] if base.get("tma") else [t, {**t, "persist": True}])  # then its persistent tile loop
                out = ([{**base, **other}, {**base, "BM": 64}, {**ring, "BM": 256, "stages": 3}] if st == "tiling" else
                       tma + [{**base, "lead": not base.get("lead", False)}] + [{**base, "stages": s} for s in (3, 5, 6) if s != base.get("stages")]
                       + ([{**base, "direct": not base.get("direct", False)}] if gemm_wgmma16.direct_ok(plan, base.get("tma", False)) else [])
                       if st == "memory_optimization" else
                       [dict(MMA16)])
            elif st == "parallel_mapping" and base.get("planes"):  # the other kernels: mma.sync (staged stores
                # where its stores bound it), the warpgroup MMA splitting A in registers
                out = [dict(MMA_SYNC), {**MMA_SYNC, "ostage": True}] if g.output.dtype == "float32" else [dict(MMA_SYNC)]
                out += [{**MMA_SYNC, "wgmma": True}]
            elif st == "parallel_mapping":
                if path != "simt":
                    out += [{**base, "WM": wm, "WN": wn} for wm, wn in kn[f"{tk}_warps"]]
                if path == "tf32x3" and plan.M <= SMALL_M and gemm_stream.reason(plan) is None:  # a few rows: the
                    out.insert(0, gemm_stream.design(plan, req.profile.sms))  # weights streamed, first measured
                if path == "tf32x3":  # then Hopper's warpgroup MMA (3xTF32, A split in registers): 3.18-3.88 ms
                    # against mma.sync's 2.61 at 4096^3 on the H200 as built (RESULTS.md), so not first
                    out += [{**base, "wgmma": True, "BM": 128, "BN": bn} for bn in (128, 64)
                            if (bn == 64 or plan.N > 64) and base.get("splitk", 1) == 1]
                    if planes_pay(plan, base):  # the planes (first where the GPU has wgmma and they pay)
                        out.append(planes_design(plan))
                    elif bsplit_pays(plan, base):
                        out.append(dict(BSPLIT))
                else:
                    out = [{**base, "BM": bm, "BN": bn, "TM": tm, "TN": tn} for bm, bn, tm, tn in kn["gemm_simt_tiles"]]
            elif st == "tiling":
                if path != "simt":
                    out = [{**base, "BM": bm, "BN": bn} for bm, bn in kn[f"{tk}_tiles"]]
                    if path == "tf32x3" and not base.get("wgmma"):  # each tile shape with its own split-K
                        out = [{**v, "splitk": sk} if (sk := split_k(plan, v, req.profile.sms)) > 1 or "splitk" in v else v
                               for v in out]
                        sk = base.get("splitk", 1)
                        out += [{**base, "splitk": s} for s in (2 * sk, max(1, sk // 2)) if sk > 1 and s != sk]
                else:
                    out = [{**base, "BK": bk} for bk in kn["gemm_simt_bk"]]
            elif st == "memory_optimization":
                if path == "mma":  # the most promising first: the budget may stop the list early
                    out = [{**base, "stages": s, "pad": p, "ldm": ld} for ld in kn["gemm_tc_ldmatrix"] + [False]
                           for p in kn["gemm_tc_pad"] for s in sorted(kn["gemm_tc_stages"], reverse=True)]
                elif path == "tf32x3" and base.get("planes"):  # the ring's tile K and depth, a narrower tile, the fold
                    out = [{**base, "BK": 32, "stages": 3, "fold": 4, "swz": True}, {**base, "BN": 64, "stages": 4},
                           {**base, "fold": 8}, {**base, "fold": 2}, {**base, "BK": 16, "stages": 6, "fold": 8, "swz": False}]
                    if gemm_tf32.bsplit_ok(plan):  # B's planes in memory or split in the ring, whichever is not first
                        out.insert(1, {**base, "bsplit": not base.get("bsplit", False), "tma": bool(base.get("bsplit"))})
                    out.insert(0, {**base, "lead": not base.get("lead", False)})  # the ring a tile further ahead
                    if base.get("swz") and not base.get("bsplit") and base.get("BN", 128) <= 128:  # TMA or the cp.async ring
                        out.insert(0, {**base, "tma": not base.get("tma", False), "stages": 3})
                elif path == "tf32x3":
                    out = [{**base, "stages": s, "ldm": ld} for ld in (True, False) for s in kn["gemm_tf32_stages"]]
                    if not base.get("wgmma") and base.get("splitk", 1) == 1 and g.output.dtype == "float32":
                        out.insert(1, {**base, "ostage": not base.get("ostage", False)})  # the other store path
                else:
                    out = [{**base, "pad": p} for p in kn["gemm_simt_pad"]]
        return out

    def _default(self, fam, g, plan, req, profile=None) -> dict:
        """The family's first design. `req` (or, for a program's untuned kernels, `profile`) names the GPU;
        without either, the H200's numbers."""
        prof = req.profile if req is not None else profile
        if fam == "direct_conv":
            return {"family": "direct_conv", "block": 256, "waves": 8}
        if fam in ("conv_sum", "gemm_sum"):
            return {"family": fam}
        if fam in EPILOGUE_CONVS:  # the narrowest wgmma tile holding every channel, 128 pixels, a ring
            bn = next(b for b in (32, 64, 128, 256) if b >= plan.conv.OC)
            return {"family": fam, "layout": "nhwc", "wgmma": True, "swz": True, "BM": 128, "BN": bn,
                    "WM": 2, "WN": 4, "stages": 3, "split": 1}
        if fam == "conv":  # N: the group's output channels, at most a 128-wide tile
            bn = 128 if plan.OCg > 64 else 64 if plan.OCg > 32 else 32
            d = {"family": "conv", "BM": 128, "BN": bn, "WM": 2, "WN": 4 if bn >= 32 else 1, "stages": 3, "split": 1,
                 "layout": conv.default_layout(plan)}
            d = {**d, **conv_tile(plan, d, prof.sms if prof is not None else DEFAULT_SMS)}
            return conv_wgmma(g, plan, d, prof) or d
        if fam == "scan":
            return {"family": "scan", "block": 256, "items": 8, "waves": 8}
        if fam == "attention":  # the copies a tile ahead only where four blocks an SM still fit: blocks beat the ring
            # (H100, 2026-12-07: heads of 64, level 3 task 50, 2.39 ms with it at two blocks an SM, 2.06 without at
            # four; heads of 96, task 43, 9.72 with it at one block, 7.16 without at two). Heads of 32 keep it (task 31)
            return {"family": "attention", "ring": 4 * attention.shared_bytes(plan, True) <= smem_limit(prof)}
        if fam == "recurrent":  # a cluster sharing W_hh where its rows fit in the blocks' shared memory
            smem = smem_limit(prof)
            # K chunks a warp first (each 16-byte load of h feeds up to 4 gate rows; not yet measured), then a gate
            # row's lanes on strided chunks
            designs = [(256, True), (512, False)]
            for c, (block, kchunk) in ((c, d) for c in ((8, 4) if clusters(prof) else ()) for d in designs):
                try:
                    recurrent.cluster_shape(plan, recurrent.RnnKnobs(block=block, cluster=c, kchunk=kchunk), smem)
                    return {"family": "recurrent", "block": block, "waves": 1, "cluster": c, **({"kchunk": True} if kchunk else {})}
                except Unsupported:
                    pass
            return {"family": "recurrent", "block": 512, "waves": 1}
        if fam == "pool":
            # up to 4 outputs a thread along the last dim, their windows' inputs loaded once (a thread an output did the
            # window's loads and 64-bit index arithmetic per output: level 1 task 44 at 39% of the floor, 0.56x compile)
            # At 4 a thread, the block's outputs stored from shared memory by consecutive threads: a thread storing its
            # own 4 leaves a warp's stores 16 bytes apart a lane (H100, 2026-12-07: task 44 2.64 -> 1.58 ms, 41 3.26 ->
            # 2.75, 46 4.03 -> 3.67; 42 2.81 -> 2.87 and 43 at 2 a thread 1.80 -> 1.97, so not there)
            # Where windows overlap along the next-to-last dim too (42: kernel 4, stride 1), rows of outputs a thread:
            # each input row loaded once for all of them (H100, 2026-12-07: 42 2.78 -> 1.84 ms at 4 rows, 1.75 at 8)
            # Where neither pays (windows that do not overlap: 45), a block an output row reducing columns (`cols`)
            if pool.default_cols(g, plan):
                return {"family": "pool", "block": pool.cols_block(g, plan), "waves": 8, "cols": True}
            v, r = pool.default_vec(g, plan), pool.default_rows(plan)
            d = {"family": "pool", "block": 256, "waves": 8, "vec": v, **({"rows": r} if r > 1 else {})}
            return {**d, "ostage": True} if v >= 4 and pool.stage_ok(plan, pool.PoolKnobs.of(d)) else d
        if fam == "grid":  # 16-byte vectors where the rows allow (the pointwise family's evidence: its scalar
            # grid-stride loop ran at 69-78% of the copy floor, vectors at 91-99%; level 1 task 37's scalar passes here
            # read at 2.85 TB/s on the H200, 68% of the copy's)
            return {"family": "grid", "block": 256, "parts": 1056, **({"vec": 4} if gridreduce.vec_ok(g, plan) else {})}
        if fam == "pointwise":
            # 16-byte vectors, a thread each over the whole grid: the copy kernel's shape (ReLU 91 -> 99% of
            # the copy floor when tuned); the scalar grid-stride loop left sigmoid/GELU at 69-78% at KernelBench's sizes
            return {"family": "pointwise", "block": 256, "items": 1, "vec": pointwise.vec_width(g.output.dtype), "waves": 0}
        if fam == "rows":
            if plan.seg:  # a BatchNorm's channel: a block a channel, the row kept in shared memory across passes
                return {"family": "rows", "mapping": "block", "block": 512 if plan.R >= 4096 else 256 if plan.R >= 256 else 128,
                        "cache": "smem" if row_cacheable(plan) else "none", "waves": 1}
            if plan.inner > 1:
                if cols_rows(plan, prof):  # few long strided rows: a thread per row would leave the GPU idle
                    return {"family": "rows", "mapping": "cols", "block": 1024, "cache": "none", "waves": 2}
                if colreduce.reason(g, plan) is None and colreduce.fills(plan, prof.sms if prof is not None else DEFAULT_SMS):
                    # one reduction of the input: 4 strided rows a thread 32 apart, a warp's loads of a row sharing their
                    # sectors (a thread a row: DRAM read 1.21x the tensor, task 47 on the H100 3.65 ms against eager's
                    # 3.02 with 4 a thread; templates/colreduce.py). A block's 16 warps split one group's rows (`split`):
                    # H100, 2026-12-07, 47 3.171 -> 2.928 ms, 51 3.103 -> 2.820 (8 warps: 2.933, 3.020)
                    return {"family": "rows", "mapping": "tcols", "block": 512, "split": True, "cache": "none", "waves": 8}
                # a thread per strided row; a row it reads again (a norm over a few channels) held in registers,
                # so the input is read once (level 1 task 36's RMSNorm over 64 channels read it twice: 56% of the floor)
                regs = plan.full_output and row_cacheable(plan) and plan.R <= rowwise.THREAD_REGS
                d = {"family": "rows", "mapping": "thread", "block": 256, "cache": "regs" if regs else "none", "waves": 8}
                # a row in registers is read again for free: plain passes (max, then the sum of exps; the mean, then
                # the centred squares) beat the one-pass forms' per-element rescaling and divides (softmax over 64
                # channels: 80 registers, no spill, where the online form spilled)
                return {**d, "online": False, "welford": False} if regs else d
            sms = prof.sms if prof is not None else DEFAULT_SMS
            if plan.R <= SHORT_ROW or (plan.R <= WARP_ROW and plan.outer >= sms * 64):
                # a warp a row: shuffles alone, no block barrier a row (LayerNorm over 64 positions after level 2 task
                # 34's conv: 6.07 ms for 1 GB with a 128-thread block a row, on the H100); longer rows too where they
                # give every warp the GPU holds one or more (level 1 task 95's 32768 rows of 4096: its online softmax
                # 0.303 -> 0.178 ms, the copy floor, on the H100, 2026-12-07; a block's 8-warp merge and 2 barriers a row)
                d = {"family": "rows", "mapping": "warp", "block": 256, "cache": "none", "waves": 8}
                return {**d, "vec": 4} if rowwise.vectorizable(plan, rowwise.RowKnobs(mapping="warp")) and plan.R >= 128 else d
            # too long for one block's shared memory: a cluster holds it, where the passes are plain sums or
            # maxima (L1/L2 norms 1.24 -> 1.75x, 0.82 -> 1.18x on the H200 at 0aec91c); online softmax and
            # Welford rows lost there (softmax 0.68 -> 0.43x, instance norm 1.10 -> 0.54x: one block an SM
            # does their per-element exp/divide between its loads and stores), so they stream instead
            if (C := row_cluster(plan, prof)) and plan.full_output and not (rowwise.online_pairs(plan) or rowwise.welford_pairs(plan)):
                return {"family": "rows", "mapping": "block", "block": 1024, "cache": "cluster", "cluster": C, "waves": 1}
            # fewer rows than SMs (a loss's mean over its per-row terms): a block of 1024 a row, its loop unrolled by the
            # template so each thread has several loads in flight (95's mean of 32768 terms took 0.052 ms at 256)
            few = plan.outer < sms
            d = {"family": "rows", "mapping": "block", "block": 1024 if few else 256 if plan.R >= 256 else 128, "cache": "none",
                 "waves": 8}
            return {**d, "vec": 4} if rowwise.vectorizable(plan, rowwise.RowKnobs()) and plan.R >= 1024 else d
        if plan.dtype == "float32":
            d = dict(MMA_SYNC)
            if plan.M <= SMALL_M and plan.N <= SMALL_M_MAX_N:  # a few rows: narrow tiles
                return narrow_design(plan, prof.sms if prof is not None else DEFAULT_SMS)
            if plan.M <= SMALL_M and gemm_stream.reason(plan) is None:  # a few rows by many weight rows: stream them
                return gemm_stream.design(plan, prof.sms if prof is not None else DEFAULT_SMS)
            sk = split_k(plan, d, prof.sms if prof is not None else DEFAULT_SMS)
            if sk > 1:
                return {**d, "splitk": sk}
            if plan.K <= STORE_BOUND_K and g.output.dtype == "float32":  # bound by its stores
                if wgmma_ok(prof) and (sp := short_planes(plan)):
                    return sp
                return {**d, "ostage": True, **(SHORT_K_TILE if plan.K <= SHORT_K else {})}  # staged stores
            if wgmma_ok(prof) and planes_pay(plan, d):
                return planes_design(plan)
            if wgmma_ok(prof) and bsplit_pays(plan, d):
                return dict(BSPLIT)
            return d
        return wgmma16_design(plan) if wgmma16_fits(plan, prof) else dict(MMA16)

    @staticmethod
    def _simt_default() -> dict:
        return {"family": "gemm", "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "pad": 4}

    # -- emit one kernel ------------------------------------------------------------------
    def emit(self, g: OpGraph, fam: str, plan, params: dict, profile) -> ProposedKernel:
        if fam == "program":
            return self._emit_program(g, plan, params, profile)
        src, steps, desc = self.kernel(g, fam, plan, params, profile)
        steps = [(ln, n or g.output) for ln, n in steps]
        return ProposedKernel(cuda_source=src, host_code=host.module_source_program(g, steps),
                              kernel_names=[ln.kernel for ln, _ in steps],
                              params=params, description=desc + _staged_note(len(host.weight_launches(g, steps))), family=fam, guard_policy="strict",
                              compile_options=["-lineinfo"], algorithm_flops=rewrite_flops([(fam, plan)]))

    def _region_params(self, prog, i: int, params: dict, profile) -> dict:
        """Kernel i's knobs in a program: the heavy one's are the candidate's own; another's are its
        family's defaults with the candidate's `r<i>.<knob>` entries (region tuning) over them."""
        if i == prog.tuned:
            return params
        sg, fam, plan, _ = prog.stages()[i]
        over = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(f"r{i}.")}
        d = self._default(fam, sg, plan, None, profile)
        return {**(fp32_grade(fam, plan, d, profile) if params.get("fp32") else d), **over}

    def _emit_program(self, g: OpGraph, prog, params: dict, profile) -> ProposedKernel:
        """The stages' kernels in one module: the heavy one with the tuned knobs, the rest with their
        family's defaults or their region's knobs; shared preludes once, kernel names made unique."""
        srcs, steps, descs, names, _, views = self._program_parts(prog, params, profile)
        graph = params.get("graph", graph_default(g, len(prog.stages())))
        staged = len(host.weight_launches(g, steps))
        desc = ("; then ".join(descs) + _staged_note(staged)
                + (f"; its {len(steps) - staged} {'other ' if staged else ''}launches replayed as one CUDA graph" if graph else ""))
        return ProposedKernel(cuda_source=join_units(srcs), host_code=host.module_source_program(g, steps, graph, views),
                              kernel_names=names, params=params, description=desc,
                              family=prog.stages()[prog.tuned][1], guard_policy="strict", compile_options=["-lineinfo"],
                              algorithm_flops=rewrite_flops([(f, p) for _, f, p, _ in prog.stages()]))

    def _program_parts(self, prog, params: dict, profile) -> tuple[list, list, list, list, list, dict]:
        """(sources, steps, descriptions, kernel names, the stage of each kernel name, the input slices
        passed as views: program.slice_leaves)."""
        srcs, steps, descs, names, owner, views = [], [], [], [], [], {}
        emitted = []
        for i, (sg, fam, plan, _) in enumerate(prog.stages()):
            if fam == "pointwise":  # no plan holds its nodes: its input slices may become inputs of their own
                sg, sliced = program.slice_leaves(sg)
                views.update(sliced)
            emitted.append([sg, *self.kernel(sg, fam, plan, self._region_params(prog, i, params, profile), profile)])
        if params.get("handoff", True):
            self._hand_off(prog, emitted, params, profile)
        if params.get("into_cat", True):
            self._into_cat(prog, emitted, params, profile)
        compiled: dict[tuple, list[str]] = {}  # a stage's source as its family wrote it -> its launches' kernel names
        for i, (sg, src, launches, desc) in enumerate(emitted):
            writes = prog.stages()[i][3]
            key = (_canonical(src, sg.inputs + sg.params), tuple(ln.kernel for ln, _ in launches))
            if key in compiled:  # the same kernels at the same shapes as an earlier stage (a network's repeated
                # blocks): launched again on other tensors, compiled once (a ResNet-101 is 621 launches)
                for (launch, node), name in zip(launches, compiled[key]):
                    steps.append((replace(launch, kernel=name), node or writes))
                    names.append(name)
                    owner.append(i)
                descs.append(desc)
                continue
            first = len(names)
            for launch, node in launches:
                if launch.kernel in names:
                    new = f"{launch.kernel}_{i}"
                    src = src.replace(f" {launch.kernel}(", f" {new}(", 1)
                    launch = replace(launch, kernel=new)
                steps.append((launch, node or writes))
                names.append(launch.kernel)
                owner.append(i)
            compiled[key] = names[first:]
            srcs.append(src)
            descs.append(desc)
        return srcs, steps, descs, names, owner, views

    def _hand_off(self, prog, emitted: list, params: dict, profile) -> None:
        """Conv -> conv with nothing between (VGG's, AlexNet's, an Inception branch's 1x1 then 3x3): the first conv
        writes its output channels last, as the second's staging pass would (rounded to TF32 where it rounds), and
        that pass is dropped (a read and a write of the tensor saved). Only where the second conv's staging is all
        that reads the tensor, and the first conv's template stores it (the implicit-GEMM and TMA convs, the direct
        conv of several channels a thread; not split-K, whole-K or an epilogue family's)."""
        stages = prog.stages()
        reads = _reads(emitted)
        for i in range(len(stages) - 1):
            sg, fam, plan, writes = stages[i]
            if fam not in ("conv", "direct_conv") or emitted[i][2][-1][1] is not None or reads[writes.name] != 1:
                continue
            j = next((j for j in range(i + 1, len(stages))
                      if any(ln.tensors and ln.tensors[0] is writes for ln, _ in emitted[j][2])), None)
            if j is None or stages[j][1] not in ("conv", *EPILOGUE_CONVS):
                continue
            (xt, staged), rest = emitted[j][2][0], emitted[j][2][1:]
            if xt.kernel != "egg_conv_xt" or len(xt.tensors) != 1 or tuple(staged.shape) != (plan.N, *plan.out_sp, plan.OC):
                continue  # (two planes' staged input is twice the batch)
            a, b = _definition(emitted[j][1], "egg_conv_xt")
            # the store changed (not whole-K, ...): a template that writes channels last
            again = self._re_emitted(prog, emitted, i, params, profile, {"cl_out": "tf32" if "round_tf32(" in emitted[j][1][a:b]
                                                                         else "raw"}, "cl_pix")
            if again is None:
                continue
            src, launches, desc = again
            launches[-1] = (launches[-1][0], staged)
            emitted[i][1:] = [src, launches, desc + "; its output written channels last for the next conv (that conv's "
                                                       "staging pass skipped)"]
            emitted[j][1] = emitted[j][1][:a] + emitted[j][1][b:]  # its staging kernel's definition goes with its launch
            emitted[j][2] = rest

    def _re_emitted(self, prog, emitted: list, i: int, params: dict, profile, knobs: dict, marker: str):
        """Stage i's kernel again with `knobs` over its own, launched as it is now (a staging pass the hand-off
        dropped stays dropped): (source, launches, description), or None where the template declines them, its source
        lacks `marker` (its store did not change: whole-K, an epilogue family's, ...) or its launches would differ."""
        sg, fam, plan, _ = prog.stages()[i]
        try:
            src, launches, desc = self.kernel(sg, fam, plan, {**self._region_params(prog, i, params, profile), **knobs}, profile)
        except Unsupported:
            return None
        if launches and launches[0][0].kernel == "egg_conv_xt" and all(ln.kernel != "egg_conv_xt" for ln, _ in emitted[i][2]):
            src, launches = _without_kernel(src, "egg_conv_xt"), launches[1:]  # its input handed off
        if marker not in src or [ln.kernel for ln, _ in launches] != [ln.kernel for ln, _ in emitted[i][2]] \
                or launches[-1][1] is not None:
            return None
        return src, launches, desc

    def _into_cat(self, prog, emitted: list, params: dict, profile) -> None:
        """Convs -> torch.cat over channels (SqueezeNet's Fire modules, Inception's branches): each conv stores into its
        channel slice of the concatenation and the concatenating pass is dropped (a read and a write of every part
        saved; the program's output too: Inception's module). Only where every part is a conv's output that the
        concatenation alone reads and each conv's template stores element by element at its NCHW index (the
        implicit-GEMM and TMA convs; not split-K, whole-K or an epilogue family's)."""
        stages = prog.stages()
        reads = _reads(emitted)
        writer = {w.name: i for i, (_, _, _, w) in enumerate(stages)}
        for j, (sg, fam, _, cat) in enumerate(stages):
            if fam != "pointwise" or sg.params or len(emitted[j][2]) != 1:
                continue
            parts = _channel_cat_parts(sg.output)
            inner = [n for n in sg.nodes if n.kind not in ("input", "param")]
            if (parts is None or any(n.op != "cat" for n in inner) or len(inner) != len(parts) - 1
                    or len({x.name for x in parts}) != len(parts)):  # (a part twice: one store cannot fill both)
                continue
            plan_parts, c0 = [], 0
            for x in parts:
                i = writer.get(x.name)
                if (x.kind != "input" or i is None or i >= j or stages[i][1] != "conv" or reads[x.name] != 1
                        or emitted[i][2][-1][1] is not None or x.dtype != cat.dtype or len(x.shape) != len(cat.shape)
                        or tuple(x.shape[2:]) != tuple(cat.shape[2:]) or x.shape[0] != cat.shape[0]):
                    break
                plan_parts.append((i, c0))
                c0 += x.shape[1]
            if len(plan_parts) != len(parts):
                continue
            osp = math.prod(cat.shape[2:])
            redone = []
            for i, at in plan_parts:
                again = self._re_emitted(prog, emitted, i, params, profile, {"cat_out": cat.shape[1]}, "cat_oo")
                if again is None:
                    break
                src, launches, desc = again
                launches[-1] = (replace(launches[-1][0], offset=at * osp), cat)
                redone.append((i, [src, launches, desc + f"; stored into channels {at}-{at + stages[i][3].shape[1] - 1} "
                                                          f"of the concatenation after it"]))
            if len(redone) != len(parts):
                continue
            for i, e in redone:
                emitted[i][1:] = e
            emitted[j][1:] = ["", [], f"the concatenation of {len(parts)} convs' outputs (written in place by them)"]

    def _stage_ms(self, req: StageRequest, prog) -> list[float] | None:
        """The best candidate's measured time for each of a program's kernels (None where not measured)."""
        if req.best is None or not req.best_kernel_ms:
            return None
        *_, names, owner, _ = self._program_parts(prog, req.best.params, req.profile)
        per = [0.0] * len(prog.stages())
        launched = Counter(names)  # a kernel several stages launch is timed as one name: shared by launch
        for n, i in zip(names, owner):
            per[i] += req.best_kernel_ms.get(n, 0.0) / launched[n]
        return per if sum(per) > 0 else None

    def _region_variants(self, req: StageRequest, prog, i: int) -> list[dict]:
        """This stage's variants of kernel i (its family's knobs), as `r<i>.` entries on the best's params."""
        sg, fam, plan, _ = prog.stages()[i]
        cur = self._region_params(prog, i, req.best.params, req.profile)
        sub = req.model_copy(update={"best": req.best.model_copy(update={"params": cur}), "best_kernel_ms": {}})
        return [{**req.best.params, **{f"r{i}.{k}": v for k, v in var.items() if cur.get(k) != v}}
                for var in self._variants(sub, fam, sg, plan) if var != cur]

    def kernel(self, g: OpGraph, fam: str, plan, params: dict, profile) -> tuple[str, list, str]:
        """One kernel of a family: (CUDA source, its launches in order as (Launch, the node it writes;
        None: the graph's output), a description). Most families launch once; a staged conv thrice."""
        sms, tpsm = profile.sms, profile.max_threads_per_sm
        if fam == "conv" and params.get("cpad"):  # its input channels padded to fours in the staged copies
            pp = conv.padded(plan)
            if pp is None or params.get("algo") == "direct" or not (params.get("tma") or params.get("whole")
                                                                    or params.get("layout") == "nhwc"):
                raise Unsupported("padded channels are read from the staged copies only (channels last)")
            src, steps, desc = self.kernel(g, fam, pp, {k: v for k, v in params.items() if k != "cpad"}, profile)
            staged = "input and weight staged channels last"
            return src, steps, desc.replace(staged, f"{staged}, the input's {plan.C} channels padded to {pp.C} (zeros)", 1)
        if fam == "pointwise":
            k = pointwise.PointwiseKnobs(block=params["block"], items=params["items"], vec=params["vec"],
                                         waves=params["waves"])
            src = pointwise.render(g, k)
            launch = host.Launch("egg_pointwise", (pointwise.grid(g, k, sms, tpsm),), (k.block,),
                                 host.leaves(g), 0, align16=k.vec > 1)
            desc = f"fused pointwise, block {k.block}, {k.items} item(s)/thread, vector width {k.vec}"
        elif fam == "conv_sum":
            src = conv_sum.render(g, plan)
            steps = [(host.Launch(name, grid, block, reads, 0), writes) for name, grid, block, reads, writes in conv_sum.launches(g, plan)]
            return src, steps, (f"the conv's spatial sum from per-tap box sums of its input ({plan.taps} taps), "
                                "then a thread per (image, channel) with the chain fused; no conv output")
        elif fam == "grid":
            k = gridreduce.GridKnobs(block=params["block"], parts=params["parts"], welford=params.get("welford", True),
                                     vec=params.get("vec", 1))
            if k.vec > 1 and not gridreduce.vec_ok(g, plan):
                raise Unsupported("16-byte vectors need fp32 rows, contiguous and a multiple of 4 long")
            steps = [(host.Launch(name, grid, block, reads, 0, align16=i == 0 and k.vec > 1), writes)  # inputs asserted aligned
                     for i, (name, grid, block, reads, writes) in enumerate(gridreduce.launches(g, plan, k, sms, tpsm))]
            return gridreduce.render(g, plan, k), steps, (
                f"grid-level reduction, block {k.block}, {gridreduce.parts_per_row(plan, k)} part(s) a row"
                + (", 16-byte vectors" if k.vec > 1 else "")
                + (f" of {plan.R // plan.seg} segment(s) of {plan.seg} (a channel's statistics over the batch)" if plan.seg else ""))
        elif fam == "gemm_sum":
            src = gemm_sum.render(g, plan)
            steps = [(host.Launch(name, grid, block, reads, 0, align16=i == 0 and (plan.vec_a or plan.vec_b)), writes)
                     for i, (name, grid, block, reads, writes) in enumerate(gemm_sum.launches(g, plan))]
            return src, steps, ("the matmul's row sum as the weight's column sums (one read of B), then a warp per row "
                                "of A with the chain fused; no matmul output")
        elif fam == "direct_conv" or (fam == "conv" and params.get("algo") == "direct"):
            k = direct_conv.DirectKnobs(block=params["block"], waves=params["waves"], ocb=params.get("ocb", 1),
                                        cl_out=params.get("cl_out", ""))
            src = direct_conv.render(g, plan, k)
            launch = host.Launch("egg_dconv", (direct_conv.grid(plan, k, sms, tpsm),), (k.block,), conv.arg_order(g, plan), 0)
            desc = (f"direct conv{plan.nd}d, exact fp32, " + (
                f"a thread per output pixel and {k.ocb} output channels, the weight in shared memory" if k.ocb > 1 else
                "a thread per output (narrow groups)") + f", block {k.block}" + ("" if k.waves else ", no grid-stride loop"))
        elif fam in EPILOGUE_CONVS:  # the channels-last wgmma conv with its template's epilogue and launches after it
            mod, k, split, p = EPILOGUE_CONVS[fam], gemm.GemmKnobs.of(params), int(params.get("split", 1)), plan.conv
            src = mod.render(g, plan, k, split)
            if k.whole:  # the whole-K persistent kernel (conv_short) with the family's epilogue a tile
                smem, static = conv_short.shared_bytes(p, k), mod.static_bytes(plan, k)
                launch = host.Launch("egg_conv", conv_short.grid(p, k, sms), (k.threads(True),), conv.arg_order(g, p, True), smem)
                how = (f"{'3xTF32' if split == 3 else 'TF32'} mma.sync), the whole K ({conv_short.kp(p)}) a tile, a persistent "
                       f"block over tiles of {k.BM} pixels x {k.BN} channels")
            else:
                smem, static = conv.shared_bytes(p, k, "nhwc"), conv.static_bytes(p, k, "nhwc") + mod.static_bytes(plan, k)
                launch = host.Launch("egg_conv", conv.grid(p, k, "nhwc"), (k.threads(True),), conv.arg_order(g, p, True, k.planes),
                                     smem, align16=conv.aligned16(p, k, "nhwc"))
                how = (f"{'3xTF32 on TF32 planes' if k.planes else 'TF32'} wgmma), tile {k.BM} pixels x all {p.OC} channels "
                       f"({k.BN} wide)")
            if smem + static > profile.shared_per_block_optin:
                raise Unsupported("tile does not fit in shared memory")
            writes, later = mod.after(plan, k, launch.tensors, sms, tpsm)
            return (src + conv.staging_source(p, tf32=split == 1, planes=k.planes),
                    _staging_launches(p, k.planes) + [(launch, writes)] +
                    [(host.Launch(name, grid, block, reads, 0), w) for name, grid, block, reads, w in later],
                    f"input and weight staged channels last; conv{p.nd}d as implicit GEMM ({how}" + mod.summary(plan, k))
        elif fam == "conv" and params.get("tma"):  # channels-last tiles by TMA from a producer warpgroup
            k = gemm.GemmKnobs.of(params)
            src, smem = conv_tma.render(g, plan, k), conv_tma.shared_bytes(plan, k)
            if smem > profile.shared_per_block_optin:
                raise Unsupported("tile does not fit in shared memory")
            # X and W as their staged copies (the kernel reads them through the maps): the raw input is then the
            # staging pass's alone, which a conv before it may write for it (_hand_off)
            launch = host.Launch("egg_conv", conv_tma.grid(plan, k, sms), (k.threads(True),), conv.arg_order(g, plan, True), smem,
                                 maps=conv_tma.tensor_maps(plan, k))
            pw, ph, pn = conv_tma.patch(plan, k)
            return (src + conv.staging_source(plan, tf32=True), _staging_launches(plan) + [(launch, None)],
                    f"input and weight staged channels last; conv{plan.nd}d as implicit GEMM (TF32 wgmma), a patch of "
                    f"{pw}x{ph} output positions{f' of {pn} images' if pn > 1 else ''} x {k.BN} channels a block, each tap's "
                    f"input box and the weight's tile "
                    f"copied by TMA from a producer warpgroup into a {k.stages}-stage ring (mbarriers, warp-specialised), "
                    f"{k.BM // 64} consumer warpgroup(s)" + (", persistent: a block an SM walking the tiles, the next "
                                                              "tile's boxes under this one's epilogue" if k.persist else "")
                    + (", in ping-pong: the consumer warpgroups take the tiles in turn, one's epilogue under the other's "
                       "MMAs" if k.pingpong else ""))
        elif fam == "conv" and params.get("whole"):  # short K: whole in shared memory, a persistent block
            k = gemm.GemmKnobs.of(params)
            split = int(params.get("split", 1))
            src, smem = conv_short.render(g, plan, k, split), conv_short.shared_bytes(plan, k)
            if smem > profile.shared_per_block_optin:
                raise Unsupported("tile does not fit in shared memory")
            launch = host.Launch("egg_conv", conv_short.grid(plan, k, sms), (k.threads(True),), conv.arg_order(g, plan, True), smem)
            return (src + conv.staging_source(plan, tf32=split == 1), _staging_launches(plan) + [(launch, None)],
                    f"input and weight staged channels last; conv{plan.nd}d as implicit GEMM ({'3xTF32' if split == 3 else 'TF32'} "
                    f"mma.sync), the whole K ({conv_short.kp(plan)}) a tile: the weight's {k.BN} channels held once, "
                    f"{k.BM}-pixel tiles walked by a persistent block, the next tile's gather under this one's MMAs and "
                    f"stores, warps {k.WM}x{k.WN}")
        elif fam == "conv":
            k = gemm.GemmKnobs.of(params)
            layout = params.get("layout", "nchw")
            src, smem = conv.render_fitting(g, plan, k, int(params.get("split", 1)), layout, profile.shared_per_block_optin)
            launch = host.Launch("egg_conv", conv.grid(plan, k, layout), (k.threads(True),),
                                 conv.arg_order(g, plan, layout == "nhwc", k.planes), smem, align16=conv.aligned16(plan, k, layout))
            desc = (f"conv{plan.nd}d as {'a GEMM per image (1x1)' if layout == 'gemm' else 'implicit GEMM'} "
                    f"({'3xTF32' if params.get('split') == 3 else 'TF32'} {'wgmma' if k.wgmma else 'mma.sync'}"
                    f"{' on TF32 high and low planes staged once' if k.planes else ''}), "
                    f"tile {k.BM} pixels x {k.BN} channels, "
                    f"{'wgmma, ' + str(k.BM // 64) + ' warpgroup(s)' if k.wgmma else f'warps {k.WM}x{k.WN}'}, {k.stages}-stage cp.async ring"
                    f"{', ldmatrix' if k.ldm else ''}{', 128-byte swizzle' if k.wgmma and k.swz else ''}"
                    f"{f', tiles {k.stages - 1} ahead' if k.wgmma and k.lead else ''}")
            steps = [(launch, None)]
            if (ranges := conv.splits(plan, k, layout)[0]) > 1:  # partials, then their sum and the epilogue
                part = conv.partials_node(plan, k, layout)
                reduce = host.Launch("egg_conv_splitk", conv.reduce_grid(plan, sms), (conv.REDUCE_BLOCK,),
                                     [part] + launch.tensors, 0)
                steps = [(launch, part), (reduce, None)]
                desc += f", split-K {ranges} ways (partials summed in order with the epilogue by a second kernel)"
            if layout == "nhwc":
                return (src + conv.staging_source(plan, tf32=int(params.get("split", 1)) == 1, planes=k.planes),
                        _staging_launches(plan, k.planes) + steps,
                        "input and weight staged channels last; " + desc)
            return src, steps, desc
        elif fam == "pool":
            k = pool.PoolKnobs.of(params)
            src = pool.render(g, plan, k)
            launch = host.Launch("egg_pool", (pool.grid(plan, k, sms, tpsm),), (k.block,), host.leaves(g), 0,
                                 align16=pool.cols_vec(g, plan) == 4 if k.cols else pool.loads16(g, plan, k.vec))
            kind = plan.pool.attrs["kind"]
            if k.cols:
                desc = (f"{kind} pool, a block an output row: input columns reduced over the window's other dims into "
                        f"shared memory ({4 * pool.cols_vec(g, plan)} bytes a load), then a thread an output, block {k.block}")
            else:
                desc = (f"{kind} pool, " + (f"{k.vec} outputs a thread (their windows' inputs loaded once"
                                            + (", 16 bytes at a time)" if pool.loads16(g, plan, k.vec) else ")")
                                            if k.vec > 1 else "a thread per output")
                        + (f", {k.rows} rows of outputs a thread (each input row under their windows loaded once)" if k.rows > 1 else "")
                        + f", block {k.block}" + ("" if k.waves else ", no grid-stride loop")
                        + (", the block's outputs stored from shared memory by consecutive threads" if k.ostage else ""))
        elif fam == "recurrent":
            k = recurrent.RnnKnobs(block=params["block"], waves=params.get("waves", 1), cluster=params.get("cluster", 0),
                                   kchunk=bool(params.get("kchunk")))
            if k.cluster:
                if not clusters(profile):
                    raise Unsupported(f"thread-block clusters on {profile.name}")
                sh = recurrent.cluster_shape(plan, k, profile.shared_per_block_optin)
                src, smem = recurrent.render_cluster(g, plan, k, sh), sh.floats(plan) * 4
                desc = (f"{RNN_NAMES[plan.cell]} recurrence over {plan.T} steps{', both directions' if plan.pair else ''}, "
                        f"a cluster of {sh.C} blocks of {k.block} "
                        f"threads per {sh.Bt} batch element(s), each block holding W_hh's rows of {sh.Hc} units in "
                        f"shared memory, h exchanged through distributed shared memory"
                        + (f"; W_hh h by {sh.KC} K chunks a warp, {-(-sh.rows(plan.G) // 32)} gate row(s) a lane" if sh.KC else ""))
            else:
                src, smem = recurrent.render(g, plan, k), 0
                desc = (f"{RNN_NAMES[plan.cell]} recurrence{' of both directions' if plan.pair else ''}, a persistent block "
                        f"of {k.block} threads per batch element "
                        f"over {plan.T} steps")
            launch = host.Launch("egg_rnn", (recurrent.grid(plan, k, sms),), (k.block,), host.leaves(g), smem)
        elif fam == "attention":
            ring = bool(params.get("ring", True))
            smem = attention.shared_bytes(plan, ring)
            if smem > profile.shared_per_block_optin:
                raise Unsupported("attention tiles do not fit in shared memory")
            src = attention.render(g, plan, ring)
            launch = host.Launch("egg_attention", attention.grid(plan), (attention.THREADS,), attention.arg_order(g, plan), smem,
                                 align16=True)
            desc = (f"fused attention ({'online softmax' if plan.node.op == 'softmax' else 'elementwise weights'}), "
                    f"3xTF32 mma.sync, {attention.BM} query rows a block over key tiles of {attention.BN} "
                    f"({'copied a tile ahead by cp.async' if ring else 'one tile at a time'}); the scores stay in registers"
                    + ("; key tiles masked for all the block's rows skipped" if plan.node.attrs.get("mask") is not None else ""))
        elif fam == "scan":
            k = scan.ScanKnobs(block=params["block"], items=params["items"], waves=params["waves"])
            src = scan.render(g, plan, k)
            launch = host.Launch("egg_scan", (scan.grid(plan, k, sms, tpsm),), (k.block,), host.leaves(g), 0)
            desc = (f"{'reverse ' if plan.scan.reverse else ''}{plan.scan.op}, "
                    + (f"block {k.block} per row, {k.items} item(s) a thread" if plan.inner == 1 else
                       f"a thread per column, block {k.block}"))
        elif fam == "rows":
            k = rowwise.RowKnobs(mapping=params["mapping"], block=params["block"], cache=params["cache"],
                                 waves=params["waves"], welford=params.get("welford", True),
                                 online=params.get("online", True), cluster=params.get("cluster", 0),
                                 vec=params.get("vec", 1), ring=params.get("ring", False), split=params.get("split", False))
            if k.cache == "cluster" and not clusters(profile):
                raise Unsupported(f"thread-block clusters on {profile.name}")
            if k.cache != "none" and not row_cacheable(plan):
                raise Unsupported("nothing to cache")
            smem = rowwise.shared_bytes(plan, k)
            if smem > profile.shared_per_block_optin:
                raise Unsupported("row does not fit in shared memory")
            if k.mapping == "tcols" and (why := colreduce.reason(g, plan)):
                raise Unsupported(f"{colreduce.TC} outputs a thread: {why}")
            src = colreduce.render(g, plan, k) if k.mapping == "tcols" else rowwise.render(g, plan, k)
            launch = host.Launch("egg_rows", ((colreduce.grid if k.mapping == "tcols" else rowwise.grid)(plan, k, sms, tpsm),),
                                 (k.block,), host.leaves(g), smem, align16=rowwise.aligned16(plan, k))
            desc = f"row program, {k.mapping} per row, block {k.block}{'' if k.cache == 'none' else f', row cached in {k.cache}'}"
            if k.vec == 4 and rowwise.vectorizable(plan, k):
                desc += (f", its {len(plan.cores)} inputs read 16 bytes a thread" if plan.cores else
                         ", the main input read 16 bytes a thread" + (" (the row's odd ends one by one)" if plan.R % 4 else ""))
            if plan.seg:
                desc += (f", each row a channel's {plan.R // plan.seg} segment(s) of {plan.seg} (statistics over the batch "
                         f"and positions in one kernel)")
            if k.mapping == "cols":
                desc = f"row program, 32 strided rows a block of {k.block}, its warps splitting each row and merging in shared memory"
            if k.mapping == "tcols":
                desc = (f"row program, {colreduce.TC} strided rows a thread 32 apart (a warp reads {32 * colreduce.TC} "
                        f"consecutive columns of each row together), block {k.block}"
                        + (f", its {k.block // 32} warps splitting the rows of one group of columns (merged in shared memory)"
                           if k.split else ""))
            if k.cache == "cluster":
                desc = (f"row program, a cluster of {k.cluster} blocks of {k.block} per row, each holding a slice of the "
                        f"row in shared memory (read once), partial results exchanged through distributed shared memory")
                if k.ring:
                    desc += (", the slice copied in chunks by bulk asynchronous copies, each chunk refilled with the next "
                             "row's as the output pass finishes with it")
        else:
            path = gemm_path(plan, params)
            k = gemm.GemmKnobs.of(params)
            align16 = False
            if path == "simt":
                if k.BM % k.TM or k.BN % k.TN or k.threads(False) > 1024:
                    raise Unsupported("tile shape")
                src, smem = gemm.render_simt(g, plan, k), 0
            elif k.stream:
                src, smem = gemm_stream.render(g, plan, k), gemm_stream.shared_bytes(plan, k)
                align16 = gemm_stream.vec(plan) == 4
                if smem > profile.shared_per_block_optin:
                    raise Unsupported("A's slice does not fit in shared memory")
            else:
                src = (gemm_wgmma16.render(g, plan, k) if path == "mma" and k.wgmma else
                       gemm.render_tc(g, plan, k) if path == "mma" else gemm_tf32.render(g, plan, k))
                smem = (gemm_wgmma16.shared_bytes(plan, k) if path == "mma" and k.wgmma else
                        gemm.shared_bytes_tc(plan, k) if path == "mma" else
                        gemm_tf32.shared_bytes_planes(plan, k) if k.planes else
                        gemm_tf32.shared_bytes_wgmma3(plan, k) if k.wgmma else gemm_tf32.shared_bytes(plan, k))
                align16 = path == "tf32x3" and gemm_tf32.aligned16(plan, k)
                if smem > profile.shared_per_block_optin:
                    raise Unsupported("tile does not fit in shared memory")
            launch = host.Launch("egg_gemm", gemm_stream.grid(plan, k) if k.stream else
                                 gemm_tf32.grid(plan, k) if path == "tf32x3" else gemm.grid(plan, k),
                                 (k.threads(path != "simt"),), gemm.arg_order(g, plan), smem, align16=align16)
            what = {"mma": "mma.sync bf16/fp16", "tf32x3": f"3xTF32 {'wgmma' if k.wgmma else 'mma.sync'} (fp32-grade)",
                    "simt": "SIMT fp32"}[path]
            desc = (f"GEMM {what} tile {k.BM}x{k.BN}"
                    + (f", warps {k.WM}x{k.WN}, {k.stages} stage(s), pad {k.pad}{', ldmatrix' if k.ldm else ''}" if path == "mma" else
                       (f", wgmma, {k.BM // 64} warpgroup(s)" if k.wgmma else f", warps {k.WM}x{k.WN}")
                       + f", {k.stages}-stage {'TMA' if k.planes and k.tma else 'cp.async'} ring{', ldmatrix' if k.ldm else ''}"
                       + (f", tiles {k.stages - 1} ahead" if k.wgmma and k.lead else "")
                       + (", output tile stored through shared memory, 16 bytes a thread" if k.ostage and not k.wgmma else "")
                       + (", each product swept over the warp tile in turn" if k.order == "term" and not k.wgmma else "") if path == "tf32x3" else
                       f"x{k.BK}, thread tile {k.TM}x{k.TN}, pad {k.pad}"))
            if k.stream:
                desc = gemm_stream.describe(plan, k)
            if path == "mma" and k.wgmma:  # wgmma k16 on tiles copied from the tensors (direct), or staged K-major first
                how = ("both operands' tiles copied from the tensors into the 128-byte swizzle (no staging pass"
                       + (": B row-major (K, N) read MN-major, 64 columns a box, the MMA's B transposed)" if gemm_wgmma16.b_mn(plan, k)
                          else ", both K-contiguous)")
                       if k.direct else "both operands staged K-major into whole 128-byte-swizzled tiles by a first kernel")
                ring = (f"{k.stages}-stage TMA ring filled by a producer warpgroup (mbarriers, warp-specialised)"
                        + (", persistent: a block an SM walking the tiles, the next tile's loads under this one's epilogue"
                           if k.persist else "")
                        + (", ping-pong: the two consumer warpgroups take 64-row tiles in turn, one's epilogue under the other's MMAs"
                           if k.pingpong else "")
                        + (", B's k-tile multicast over clusters of two row tiles (each block copies half)" if k.mcast else "")
                        + (", B's k-tile one 4-d box" if gemm_wgmma16.b_chunks(plan, k) else "") if k.tma else
                        f"{k.stages}-stage cp.async ring{f', tiles {k.stages - 1} ahead' if k.lead else ''}")
                desc = (f"GEMM {plan.dtype} wgmma (fp32 accumulation) tile {k.BM}x{k.BN}, {k.BM // 64} warpgroup(s), "
                        f"{ring}, {how}, 4 MMAs of k16 a tile")
                staged = None if k.direct else gemm_wgmma16.staged_node(g, plan, k)
                main = host.Launch("egg_gemm", gemm_wgmma16.grid(plan, k, sms), (k.threads(True),),
                                   ([] if k.direct or k.tma else [staged]) + gemm.arg_order(g, plan), smem,
                                   maps=gemm_wgmma16.tensor_maps(g, plan, k) if k.tma else [])
                if k.direct:
                    return src, [(main, None)], desc
                stage = host.Launch("egg_gemm_stage", gemm_wgmma16.stage_grid(plan, k), (gemm_wgmma16.STAGE_BLOCK,),
                                    gemm.arg_order(g, plan), 0)
                return src, [(stage, staged), (main, None)], desc
            if path == "tf32x3" and k.planes:  # the operands split into planes by a first kernel, then the GEMM on them
                planes = gemm_tf32.planes_node(g, plan, k)
                split = host.Launch("egg_gemm_split", gemm_tf32.split_grid(plan, k), (gemm_tf32.SPLIT_BLOCK,),
                                    gemm.arg_order(g, plan), 0)
                main = host.Launch("egg_gemm", launch.grid, launch.block, ([] if k.tma else [planes]) + gemm.arg_order(g, plan), smem,
                                   maps=gemm_tf32.planes_maps(g, plan, k) if k.tma else [])
                what = ("A split once into TF32 high and low planes by a first kernel, B's raw tiles split in shared "
                        "memory as they arrive" if k.bsplit else "both operands split once into TF32 high and low planes by a first kernel")
                if k.tma:
                    what += ", the planes' tiles copied by TMA from a producer warpgroup (mbarriers, warp-specialised)"
                return src, [(split, planes), (main, None)], (
                    desc + f", {what}, "
                           f"3 MMAs a k-step from 4 tiles of K {k.BK} a stage{' (128-byte swizzle)' if k.swz else ''}, summed per {k.fold} k-tile(s)")
            if path == "tf32x3" and (ranges := gemm_tf32.splits(plan, k)[0]) > 1:  # partials, then their sum and the epilogue
                part = gemm_tf32.partials_node(g, plan, k)
                reduce = host.Launch("egg_gemm_splitk", gemm_tf32.reduce_grid(plan, sms), (gemm_tf32.REDUCE_BLOCK,),
                                     [part] + gemm.arg_order(g, plan), 0)
                return src, [(launch, part), (reduce, None)], (
                    desc + f", split-K {ranges} ways (partials summed in order with the epilogue by a second kernel)")
        return src, [(launch, None)], desc
