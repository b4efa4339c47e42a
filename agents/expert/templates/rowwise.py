"""Row programs: reductions over a contiguous range of dims, and the normalizations built on
them (softmax, log-softmax, layer/RMS norm, L1/L2 norm, x - mean, ...).

The tensor the reductions read is viewed as (outer, R, inner). A row is one (outer, inner)
pair; each reduction is one pass over the row's R elements, and a full-size output is
written in a last pass. Mappings: a block per row, a warp per row, a thread per row
(coalesced across rows when inner > 1), or `cols`: 32 adjacent rows a block (inner > 1: one row a
lane, so a warp reads 128 contiguous bytes), the block's warps splitting each row's R elements and
merging through shared memory; for few long strided rows (a BatchNorm's statistics over the batch
of a GEMM's output: 4096 rows of 16384), where a thread per row leaves the GPU nearly idle."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from agents.expert.codegen import CLUSTER_PRELUDE, CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import (Node, OpGraph, Unsupported, ancestors, block_holds_segmented, check_elementwise_after,
                                   dim_runs, segmented_row, unview)
from agents.expert.templates.gemm_tf32 import TMA_PRELUDE


@dataclass
class RowPlan:
    shape: tuple
    dims: tuple
    outer: int
    R: int
    inner: int
    reductions: list  # Node, in order
    full_output: bool
    main: Node | None  # the input read at the row's index in every pass (candidate for caching)
    seg: int = 0  # a segmented row (reduced over leading and trailing dims, a BatchNorm's channel): the
    # row's elements come in runs of `seg` contiguous ones, `inner * seg` apart; row j's run starts at j * seg
    cores: list = field(default_factory=list)  # where no one input is the main one: the fp32 inputs of the reduced
    # tensor's shape, each read at the row's index (a triplet loss's anchor, positive and negative), 16 bytes a read


@dataclass
class RowKnobs:
    mapping: str = "block"  # block, warp, thread, cols, tcols (templates/colreduce.py: 4 strided rows a thread, 32 apart)
    block: int = 256
    cache: str = "none"  # keep the main input's row across passes: "smem", "regs" (ceil(R/block) values a
    # thread), or "cluster" (a slice of the row in each block of a cluster of `cluster`, read from memory once)
    cluster: int = 0
    waves: int = 8
    welford: bool = True  # a mean and the centred sum of squares after it in one pass (Welford/Chan)
    online: bool = True  # a max and the sum of exp(v - max) after it in one pass (online softmax)
    vec: int = 1  # 4: the main input read 16 bytes a thread (a contiguous fp32 row, no cache)
    split: bool = False  # tcols only: a block's warps share one group of columns, splitting its rows (merged in shared
    # memory in warp order): block / 32 times the threads, for more loads in flight
    ring: bool = False  # cluster only: the slice copied by bulk asynchronous copies in chunks of 4 x block floats, the
    # first pass waiting chunk by chunk and the output pass refilling each chunk with the next row's as it finishes
    # with it (loads of the next row under this row's stores). Measured slower than streaming the row twice (the
    # block an SM still runs its exp/divide passes with no memory traffic beside them): a knob, not offered


THREAD_REGS = 64  # the longest row a thread keeps in registers (a strided row: a norm over channels)
THREAD_SMEM = 64 * 1024  # a block's shared memory for its threads' rows, where they are too long for registers

INIT = {"sum": "0.0f", "prod": "1.0f", "amax": "-INFINITY", "amin": "INFINITY",
        "argmax": "-INFINITY", "argmin": "INFINITY"}


def combine(op: str, a: str, b: str) -> str:
    return {"sum": f"{a} + {b}", "prod": f"{a} * {b}", "amax": f"egg_max({a}, {b})", "amin": f"egg_min({a}, {b})"}[op]


def arg_step(better: str, v: str, acc: str, ai: str, r: str = "r") -> str:
    """An argmax/argmin's step over elements in increasing index: a NaN beats any number and the first NaN stays,
    as in torch (its argmax and argmin both return the first NaN's index); ties keep the first."""
    return f"{{ const float av = {v}; if (av {better} {acc} || (av != av && {acc} == {acc})) {{ {acc} = av; {ai} = {r}; }} }}"


def arg_takes(better: str, ov: str, oi: str, acc: str, ai: str) -> str:
    """Whether another partial (ov at index oi) replaces (acc at ai) in an argmax/argmin's merge: the better
    value, a NaN over a number, and between equals (two NaN included) the smaller index."""
    return f"({ov} {better} {acc} || ({ov} != {ov} && {acc} == {acc}) || (({ov} == {acc} || ({ov} != {ov} && {acc} != {acc})) && {oi} < {ai}))"


def needs_grid(outer: int, R: int, inner: int, seg: int = 0) -> bool:
    """Too few rows to fill the GPU and too long to reduce in one block, or a segmented row too long for
    a block to cache (a BatchNorm's channel over a large batch): a grid-level reduction."""
    return (outer * inner < 132 and R > (1 << 20)) or (seg > 0 and not block_holds_segmented(R))


def _grown_by_broadcast(g: OpGraph, numel: int) -> bool:
    """Some pointwise node has `numel` elements though none of its tensor operands has as many."""
    for n in g.nodes:
        if n.kind == "pw" and math.prod(n.shape) == numel:
            sizes = [math.prod(a.shape) for a in n.args if isinstance(a, Node)]
            if sizes and max(sizes) < numel:
                return True
    return False


def plan_rows(g: OpGraph, grid_ok: bool = False) -> RowPlan:
    """`grid_ok`: plan it even where the rows are too few and too long (templates/gridreduce.py takes it)."""
    reds = [n for n in g.nodes if n.kind == "reduce"]
    check_elementwise_after(g, reds, "reduction")
    shape, dims = tuple(reds[0].args[0].shape), tuple(reds[0].dims)
    for r in reds:
        if tuple(r.args[0].shape) != shape or tuple(r.dims) != dims:
            raise Unsupported("reductions over different shapes or dims in one task")
    seg = 0
    if list(dims) != list(range(dims[0], dims[-1] + 1)):
        runs = dim_runs(dims)
        if not segmented_row(shape, runs, any_length=grid_ok):
            raise Unsupported(f"reduction over non-adjacent dims {dims}")
        seg = math.prod(shape[d] for d in runs[1])
        outer, inner, R = 1, math.prod(shape[runs[0][-1] + 1: runs[1][0]]), math.prod(shape[d] for d in dims)
    else:
        outer = math.prod(shape[: dims[0]])
        R = math.prod(shape[dims[0]: dims[-1] + 1])
        inner = math.prod(shape[dims[-1] + 1:])
    if not grid_ok and needs_grid(outer, R, inner, seg):
        raise Unsupported(f"a reduction of {R} elements into {outer * inner} output(s) (needs a grid-level reduction)")
    out = g.output
    # full size: the reduced tensor's shape, or a view of it (group norm reduces a (N, G, C/G, ...) view);
    # not a tensor of that many elements grown by broadcasting smaller ones ((N, 1) + (1, C, 1, 1) is
    # (1, C, N, 1): its element i is not the input's element i)
    full = tuple(out.shape) == shape or (math.prod(out.shape) == math.prod(shape) and math.prod(out.shape) != outer * inner
                                         and not _grown_by_broadcast(g, math.prod(shape)))
    if not full and math.prod(out.shape) != outer * inner:
        raise Unsupported(f"output shape {out.shape} is neither the input's nor the reduced one")
    if any(n.kind == "gemm" for n in g.nodes):
        raise Unsupported("a matmul feeding a reduction")
    if any(r.op in ("argmax", "argmin") for r in reds) and not (len(reds) == 1 and out is reds[0]):
        raise Unsupported("argmax/argmin inside a larger expression")
    # the input read at the row's index: the reduced tensor itself, or one only ever read through views of
    # it (group norm reduces an (N, G, -1) view of x): a view keeps the linear index
    n = math.prod(shape)
    mains = [t for t in g.inputs if tuple(t.shape) == shape or
             (math.prod(t.shape) == n and g.consumers(t) and all(c.op == "view" for c in g.consumers(t)))]
    cores = [t for t in mains if tuple(t.shape) == shape and t.dtype == "float32"] if len(mains) > 1 else []
    return RowPlan(shape, dims, outer, R, inner, reds, full, mains[0] if len(mains) == 1 else None, seg,
                   cores if len(cores) == len(mains) else [])


def welford_pairs(p: RowPlan) -> dict[int, int]:
    """{i: j}: reduction j is sum((v - f(sum_i(v)))^2) over the same v as reduction i = sum(v) (a
    norm's mean, then its centred variance): Welford's update gives both in one pass over the row."""
    pairs = {}
    if p.R > 1 << 24:  # the running count is a float
        return pairs
    for j, r1 in enumerate(p.reductions):
        sq = r1.args[0]
        if r1.op != "sum" or not (sq.kind == "pw" and sq.op == "mul" and sq.args[0] is sq.args[1]):
            continue
        xc = sq.args[0]
        if not (xc.kind == "pw" and xc.op == "sub" and isinstance(xc.args[1], Node)):
            continue
        v, mean = xc.args
        if not (mean.kind == "pw" and mean.op == "div" and isinstance(mean.args[1], float)):
            continue
        r0 = mean.args[0]
        i = next((i for i, r in enumerate(p.reductions) if r is r0), None)
        if i is not None and i < j and r0.op == "sum" and r0.args[0] is v and tuple(mean.shape) == tuple(r0.shape):
            pairs[i] = j
    return pairs


def online_pairs(p: RowPlan) -> dict[int, int]:
    """{i: j}: reduction j is sum(exp(v - max_i(v))) over the same v as reduction i = amax(v) (softmax,
    log-softmax, logsumexp): the online update keeps (max, sum) together, one pass over the row."""
    pairs = {}
    for j, r1 in enumerate(p.reductions):
        e = r1.args[0]
        if r1.op != "sum" or not (e.kind == "pw" and e.op == "exp"):
            continue
        d = e.args[0]
        if not (isinstance(d, Node) and d.kind == "pw" and d.op == "sub" and isinstance(d.args[1], Node)):
            continue
        r0 = unview(d.args[1])
        i = next((i for i, r in enumerate(p.reductions) if r is r0), None)
        if i is not None and i < j and r0.op == "amax" and r0.args[0] is d.args[0] and i not in pairs.values():
            pairs[i] = j
    return pairs


def sibling_runs(p: RowPlan, plain: list[int]) -> dict[int, list[int]]:
    """{first: [first, ...]}: runs of consecutive plain reductions (indices in `plain`) none of which reads another's
    result, so one loop over the row computes them all (a triplet loss's two distances: the anchor read once; a mean's
    sum beside its count)."""
    runs: dict[int, list[int]] = {}
    cur: list[int] = []
    for ri in range(len(p.reductions)):
        if ri in plain and cur and cur[-1] == ri - 1 and not ancestors(p.reductions[ri].args[0]) & {id(p.reductions[j]) for j in cur}:
            cur.append(ri)
            continue
        if len(cur) > 1:
            runs[cur[0]] = cur
        cur = [ri] if ri in plain else []
    if len(cur) > 1:
        runs[cur[0]] = cur
    return runs


def online_update(m: str, s: str, v: str) -> str:
    """One element v into (running max m, sum s of exp(x - m)): a new max rescales the sum. A NaN takes the max's
    branch, so s becomes NaN (0 * NaN at the first element) and stays so, as torch's softmax makes the row NaN."""
    return (f"{{ const float ov = {v}; if (ov > {m} || ov != ov) {{ {s} = {s} * expf({m} - ov) + 1.0f; {m} = ov; }} "
            f"else if (ov > -INFINITY) {s} += expf(ov - {m}); }}")


def online_merge(m: str, s: str, om: str, os_: str) -> str:
    """Fold (om, os_) into (m, s); a NaN on either side makes both NaN (an empty side, -inf and 0, changes nothing)."""
    return (f"{{ const float mb = {om}, sb = {os_}; const float mm = egg_max({m}, mb); if (mm != -INFINITY) {{ "
            f"{s} = {s} * expf({m} - mm) + sb * expf(mb - mm); {m} = mm; }} }}")


def _online(k: RowKnobs, ri: int, v: str, body: str, row_loop, idx: str) -> list[str]:
    """One pass: each thread's (max, sum of exps), merged across lanes and warps; `acc{ri}` ends as
    the row's max and `acc{ri}s` as its sum of exp(v - max)."""
    m, s = f"om{ri}", f"os{ri}"
    code = [f"        float {m} = -INFINITY, {s} = 0.0f;"]
    code += row_loop([f"            long long i = {idx};", body, f"            {online_update(m, s, v)}"])
    sh = "__shfl_xor_sync(0xffffffffu, {}, s)"
    if k.mapping in ("block", "warp"):
        code.append("        for (int s = 16; s > 0; s >>= 1) " + online_merge(m, s, sh.format(m), sh.format(s)))
    if k.mapping == "cols":
        code += cols_merge([m, s], lambda a, b: online_merge(a[0], a[1], b[0], b[1]))
    if k.mapping == "block":
        code += [f"        if ((threadIdx.x & 31) == 0) {{ sred[threadIdx.x >> 5] = {m}; sred2[threadIdx.x >> 5] = {s}; }}",
                 "        __syncthreads();",
                 f"        {m} = sred[0]; {s} = sred2[0];",
                 "        for (int w = 1; w < (blockDim.x >> 5); ++w) " + online_merge(m, s, "sred[w]", "sred2[w]"),
                 "        __syncthreads();"]
    code.append(f"        const float acc{ri} = {m}, acc{ri}s = {s};")
    return code


COLS = ("scol", "scol2", "scol3")  # a cols block's merge arrays, a value per thread


def cols_merge(vals: list[str], fold) -> list[str]:
    """A cols block's merge: each thread's partial `vals` of its row (lane x = threadIdx.x & 31) into
    shared arrays, then every thread folds its row's partials in warp order (the same order
    everywhere, so the result is deterministic and every warp ends with the same)."""
    put = " ".join(f"{a}[threadIdx.x] = {v};" for a, v in zip(COLS, vals))
    first = " ".join(f"{v} = {a}[threadIdx.x & 31];" for a, v in zip(COLS, vals))
    other = [f"{a}[w * 32 + (threadIdx.x & 31)]" for a in COLS[:len(vals)]]
    return [f"        {put}", "        __syncthreads();", f"        {first}",
            f"        for (int w = 1; w < (blockDim.x >> 5); ++w) {fold(vals, other)}", "        __syncthreads();"]


def chan_merge(c: str, m: str, q: str, ob: str, om: str, oq: str) -> str:
    """Fold the triple (ob, om, oq) into (count c, mean m, centred sum of squares q): Chan's rule."""
    return (f"{{ const float nb = {ob}, mb = {om}, qb = {oq}; const float n = {c} + nb; if (n > 0.0f) {{ "
            f"const float dl = mb - {m}, f = nb / n; {m} += dl * f; {q} += qb + dl * dl * {c} * f; {c} = n; }} }}")


def welford_update(c: str, m: str, q: str, v: str) -> str:
    """One element v into (c, m, q): Welford's update."""
    return f"{c} += 1.0f; {{ const float dl = {v} - {m}; {m} += dl / {c}; {q} += dl * ({v} - {m}); }}"


def welford_lanes(c: str, m: str, q: str) -> str:
    """Merge the triple over the warp's lanes (every lane ends with the warp's)."""
    sh = "__shfl_xor_sync(0xffffffffu, {}, s)"
    return "for (int s = 16; s > 0; s >>= 1) " + chan_merge(c, m, q, sh.format(c), sh.format(m), sh.format(q))


def welford_warps(c: str, m: str, q: str, arrays: tuple[str, str, str], warps: str) -> list[str]:
    """Merge the warps' triples through shared `arrays` (every thread ends with the block's)."""
    a, b, d = arrays
    return [f"if ((threadIdx.x & 31) == 0) {{ {a}[threadIdx.x >> 5] = {c}; {b}[threadIdx.x >> 5] = {m}; "
            f"{d}[threadIdx.x >> 5] = {q}; }}",
            "__syncthreads();",
            f"{c} = {a}[0]; {m} = {b}[0]; {q} = {d}[0];",
            f"for (int w = 1; w < {warps}; ++w) " + chan_merge(c, m, q, f"{a}[w]", f"{b}[w]", f"{d}[w]"),
            "__syncthreads();"]


def _welford(p: RowPlan, k: RowKnobs, ri: int, v: str, body: str, row_loop, idx: str) -> list[str]:
    """One pass: each thread's (count, mean, M2) by Welford's update, merged across lanes and warps by
    Chan's rule; `acc{ri}` ends as the row's sum and `acc{ri}q` as its centred sum of squares."""
    c, m, q = f"wc{ri}", f"wm{ri}", f"wq{ri}"
    code = [f"        float {c} = 0.0f, {m} = 0.0f, {q} = 0.0f;"]
    code += row_loop([f"            long long i = {idx};", body, f"            {welford_update(c, m, q, v)}"])
    if k.mapping in ("block", "warp"):
        code.append("        " + welford_lanes(c, m, q))
    if k.mapping == "block":
        code += ["        " + ln for ln in welford_warps(c, m, q, ("swc", "swm", "swq"), "(blockDim.x >> 5)")]
    if k.mapping == "cols":
        code += cols_merge([c, m, q], lambda a, b: chan_merge(*a, *b))
    code.append(f"        const float acc{ri} = {m} * {c}, acc{ri}q = {q};")
    return code


VEC_AHEAD = 4  # 16-byte loads a thread issues before using the first (the copy kernel's bytes in flight)
CLUSTER_SIZES = (2, 4, 8)  # blocks a row's cluster (8: the portable limit)


def cluster_fits(p: RowPlan, C: int, smem_limit: int) -> bool:
    """Whether a cluster of C blocks holds the row (a slice a block, with the exchange arrays)."""
    return _cluster_floats(p, C) * 4 <= smem_limit


def _slice(p: RowPlan, C: int) -> int:
    per = -(-p.R // C)
    return -(-per // 4) * 4  # a block's share of the row, whole 16-byte chunks


def _cluster_floats(p: RowPlan, C: int, block: int = 0) -> int:
    """The cluster row's shared memory in floats; `block` (a ring's): with its chunks' barriers (two floats each)."""
    ring = 2 * _chunks(p, C, block) if block else 0
    return _slice(p, C) + (4 if _peeled(p) else 0) + 5 * 32 + 3 * C * max(1, len(p.reductions)) + ring


def _chunks(p: RowPlan, C: int, block: int) -> int:
    """A ring's chunks a slice: 4 floats a thread each (one 16-byte read a thread a chunk); a peeled row's slice
    copied from the 16-byte boundary before it takes up to 4 floats more."""
    return -(-(_slice(p, C) + (4 if _peeled(p) else 0)) // (4 * block))


# a contiguous run of global memory into shared memory by the copy engine, its bytes completing barrier b's
# transaction (with TMA_PRELUDE's barriers; tests/cpu_emulator.py gives a C++ version)
BULK_PRELUDE = r"""__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(b)) : "memory"); }
"""


def cluster_reason(p: RowPlan) -> str | None:
    """Why the plan's rows cannot be cached across a cluster (None: they can)."""
    if p.main is None or p.inner != 1:
        return "a row cached across a cluster needs a block per row over a contiguous row of one input"
    if any(r.op in ("argmax", "argmin") for r in p.reductions):
        return "argmax/argmin across a cluster"
    return None


def _cluster_check(p: RowPlan, k: RowKnobs) -> None:
    if k.mapping != "block" or k.cluster not in CLUSTER_SIZES:
        raise Unsupported("a row cached across a cluster needs a block per row over a contiguous row of one input")
    if why := cluster_reason(p):
        raise Unsupported(why)
    if k.ring and not ring_ok(p):
        raise Unsupported("a ring of bulk copies needs fp32 rows and a full-size output")


def ring_ok(p: RowPlan) -> bool:
    """Whether a cluster's slices can come by a ring of bulk copies: fp32 rows (a slice copied from the 16-byte
    boundary at or before its start), and an output pass over the row (where each chunk goes to the next row's copy)."""
    return (_float4_row(p) or _peeled(p)) and p.full_output


def _cluster_merge(kind: str, ri: int, C: int, vals: list[str], op: str = "") -> list[str]:
    """After the block's merge (every thread holds the block's `vals`): thread 0 writes them into every
    block's exchange slots `cx[(3 ri + v) C + rank]`, a cluster barrier, then every thread folds the C
    blocks' values in rank order (the same order everywhere, so every block ends with the same)."""
    base = 3 * ri * C
    put = " ".join(f"cluster_map(cx, rk)[{base + v * C} + rank] = {x};" for v, x in enumerate(vals))
    code = [f"        if (threadIdx.x == 0) for (unsigned rk = 0; rk < {C}u; ++rk) {{ {put} }}",
            "        cluster_sync();"]
    at = lambda v, w: f"cx[{base + v * C} + {w}]"  # noqa: E731
    first = " ".join(f"{x} = {at(v, 0)};" for v, x in enumerate(vals))
    if kind == "plain":
        fold = f"{vals[0]} = {combine(op, vals[0], at(0, 'w'))};"
    elif kind == "online":
        fold = online_merge(vals[0], vals[1], at(0, "w"), at(1, "w"))
    else:
        fold = chan_merge(vals[0], vals[1], vals[2], at(0, "w"), at(1, "w"), at(2, "w"))
    return code + [f"        {first}", f"        for (int w = 1; w < {C}; ++w) {fold}"]


def render(g: OpGraph, p: RowPlan, k: RowKnobs) -> str:
    out = g.output
    tensors = g.inputs + g.params
    args = ", ".join([f"{CTYPE[out.dtype]}* __restrict__ out"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors])
    rows = p.outer * p.inner
    cache = k.cache if (p.main is not None and k.cache in ("smem", "regs") and k.mapping in ("block", "thread")) else "none"
    C = 0
    if k.cache == "cluster":
        _cluster_check(p, k)
        cache, C = "cluster", k.cluster
    items = p.R if k.mapping == "thread" else -(-p.R // k.block)  # a thread per row holds all of it
    vec4 = k.vec == 4 and vectorizable(p, k)
    c4 = C > 0 and _float4_row(p)  # a cluster's slice read as float4 from shared memory
    peel = _peeled(p) and (vec4 or C > 0)  # 16-byte reads of rows that do not start on a 16-byte boundary
    if cache == "regs" and items > (THREAD_REGS if k.mapping == "thread" else 32):
        raise Unsupported("row too long to keep in registers")
    done: dict[str, str] = {}

    def special(n):
        return done.get(n.name)

    def loader(first_pass):
        def load(t, idx):
            if cache == "cluster" and t is p.main and idx == "i":  # staged before the first pass
                return "sv[u]" if c4 or k.ring else ("srow[r - r0 + sh]" if peel else "srow[r - r0]")
            if vec4 and t is p.main and idx == "i":
                return "mv[u]"  # this 16-byte piece's element
            if vec4 and idx == "i" and (j := next((j for j, c in enumerate(p.cores) if c is t), None)) is not None:
                return f"mv{j}[u]"  # a core input's element
            if cache != "none" and t is p.main and idx == "i":
                # a thread's own row in shared memory lies down a column: lanes side by side, no bank conflicts
                slot = ("srow[r * blockDim.x + threadIdx.x]" if k.mapping == "thread" else "srow[r]") if cache == "smem" else "xr[it]"
                return f"({slot} = to_f({t.name}[i]))" if first_pass else slot
            return f"to_f({t.name}[{idx}])"
        return load

    ring_waited: list[bool] = []  # a ring's first pass over the row emitted (it waits for the copies)
    nch_ring = _chunks(p, C, k.block) if k.ring else 0

    def row_loop(body_lines: list[str], tail: tuple[str, ...] = (), scalar: list[str] | None = None,
                 refill: bool = False) -> list[str]:
        """The loop over a row's elements; unrolled over register slots when the row lives in registers.
        `scalar`: the body for a peeled row's odd elements (default: `body_lines` reading the main input
        element by element). `refill`: the row's last pass over a ring (its chunks go to the next row's copies)."""
        if p.inner == 1 and not p.seg:  # i = o * R + r: a row vector broadcast over the rows is read at i % R, that is r
            # (a 64-bit modulo an element, half of level 1 task 4's instructions)
            body_lines = [ln.replace(f"((i) % {p.R}LL)", "r") for ln in body_lines]
            scalar = None if scalar is None else [ln.replace(f"((i) % {p.R}LL)", "r") for ln in scalar]
        if cache == "cluster" and k.ring:  # a chunk at a time: one 16-byte read a thread, the row's first pass waiting
            # for each chunk's copy, the output pass handing each chunk back for the next row's copy. Chunks are
            # places in shared memory: srow[q] holds element r0 - sh + q (sh: the slice's start past a 16-byte
            # boundary, 0 for rows of whole pieces), so a row's chunk and the next row's lie in the same place
            wait = ["            mbar_wait(cbar + ch, ph);"] if not ring_waited else []
            ring_waited.append(True)
            hand = (["            __syncthreads();  // every thread done with this chunk: the next row's copy may land there",
                     f"            if (threadIdx.x == 0 && row + {rstep} < {rows}LL) fill(ch, row + {rstep});"] if refill else [])
            inside = ["            if (r < r0 || r >= r1) continue;  // a neighbour's element in the 16-byte piece"] if peel else []
            return ([f"        for (int ch = 0; ch < {nch_ring}; ++ch) {{"] + wait +
                    [f"            const long long q4 = (long long)ch * {4 * k.block} + 4LL * threadIdx.x, r4 = r0 - sh + q4;",
                     "            if (r4 + 3 >= r0 && r4 < r1) {",
                     "            const float4 sv4 = *reinterpret_cast<const float4*>(srow + q4);",
                     "            const float sv[4] = {sv4.x, sv4.y, sv4.z, sv4.w};",
                     "            #pragma unroll",
                     "            for (int u = 0; u < 4; ++u) {",
                     "            const long long r = r4 + u;"] + inside + body_lines + ["            }", *tail, "            }"] + hand
                    + ["        }"])
        if cache == "cluster" and c4:  # this block's slice of the row, 16 bytes of shared memory a read
            return (["        for (long long r4 = r0 + 4LL * threadIdx.x; r4 < r1; r4 += 4LL * blockDim.x) {",
                     "            const float4 sv4 = *reinterpret_cast<const float4*>(srow + (r4 - r0));",
                     "            const float sv[4] = {sv4.x, sv4.y, sv4.z, sv4.w};",
                     "            #pragma unroll",
                     "            for (int u = 0; u < 4; ++u) {",
                     "            const long long r = r4 + u;"] + body_lines + ["            }", *tail, "        }"])
        if cache == "cluster":  # this block's slice of the row
            return ["        for (long long r = r0 + threadIdx.x; r < r1; r += blockDim.x) {"] + body_lines + ["        }"]
        if vec4:  # VEC_AHEAD 16-byte pieces of the main input a thread loaded at once, then each element in turn
            A = VEC_AHEAD
            if peel:  # the row's first elements up to a 16-byte boundary and its last odd ones, element by element,
                # then the body from that boundary (whole 16-byte pieces)
                lines = scalar if scalar is not None else [ln.replace("mv[u]", f"to_f({p.main.name}[i])") for ln in body_lines]
                x = p.main.name
                return (["        {  // hd: elements before the row's first 16-byte boundary; be: the body's end",
                         f"        const long long hd = (4 - ((o * {p.R}LL) & 3)) & 3, be = hd + (({p.R}LL - hd) & ~3LL);",
                         f"        for (long long e = {lane}; e < hd + {p.R}LL - be; e += {nl}) {{",
                         "            const long long r = e < hd ? e : be + (e - hd);"] + lines + ["        }",
                         f"        for (long long rb = hd + 4LL * {lane}; rb < be; rb += {4 * A}LL * {nl}) {{",
                         f"            float4 mvs[{A}];",
                         "            #pragma unroll",
                         f"            for (int q = 0; q < {A}; ++q) {{ const long long r4 = rb + 4LL * q * {nl};"
                         f" if (r4 < be) mvs[q] = *reinterpret_cast<const float4*>({x} + o * {p.R}LL + r4); }}",
                         "            #pragma unroll",
                         f"            for (int q = 0; q < {A}; ++q) {{",
                         f"            const long long r4 = rb + 4LL * q * {nl};",
                         "            if (r4 >= be) break;",
                         "            const float mv[4] = {mvs[q].x, mvs[q].y, mvs[q].z, mvs[q].w};",
                         "            #pragma unroll",
                         "            for (int u = 0; u < 4; ++u) {",
                         "            const long long r = r4 + u;"] + body_lines + ["            }", *tail, "            }", "        }",
                         "        }"])
            # (the name of a piece's values, the tensor, where the row starts in it): the main input or the cores, then
            # fp32 inputs of the row's length read at r (a matrix-vector product's vector), 16 bytes a read as well
            at = f" + o * {p.R}LL"
            vs = [("mv", p.main.name, at)] if p.main is not None else [(f"mv{j}", c.name, at) for j, c in enumerate(p.cores)]
            text = "\n".join(body_lines)
            rv = [(f"rv{j}", t.name, "") for j, t in enumerate(g.inputs) if t.dtype == "float32" and f"to_f({t.name}[r])" in text]
            body_lines = [functools.reduce(lambda ln, v: ln.replace(f"to_f({v[1]}[r])", f"{v[0]}[u]"), rv, ln) for ln in body_lines]
            vs += rv
            return ([f"        for (long long rb = 4LL * {lane}; rb < {p.R}LL; rb += {4 * A}LL * {nl}) {{"] +
                    [f"            float4 {m}s[{A}];" for m, _, _ in vs] +
                    ["            #pragma unroll",
                     f"            for (int q = 0; q < {A}; ++q) {{ const long long r4 = rb + 4LL * q * {nl};"
                     f" if (r4 < {p.R}LL) {{ " + " ".join(f"{m}s[q] = *reinterpret_cast<const float4*>({x}{a} + r4);"
                                                         for m, x, a in vs) + " } }",
                     "            #pragma unroll",
                     f"            for (int q = 0; q < {A}; ++q) {{",
                     f"            const long long r4 = rb + 4LL * q * {nl};",
                     f"            if (r4 >= {p.R}LL) break;"] +
                    [f"            const float {m}[4] = {{{m}s[q].x, {m}s[q].y, {m}s[q].z, {m}s[q].w}};" for m, _, _ in vs] + [
                     "            #pragma unroll",
                     "            for (int u = 0; u < 4; ++u) {",
                     "            const long long r = r4 + u;"] + body_lines + ["            }", *tail, "            }", "        }"])
        if cache == "regs":
            return ([f"        #pragma unroll\n        for (int it = 0; it < {items}; ++it) {{",
                     f"            long long r = {lane} + (long long)it * {nl};",
                     f"            if (r >= {p.R}LL) break;"] + body_lines + ["        }"])
        unroll = (["        #pragma unroll 4"] if k.mapping == "cols" else  # loads of 4 steps in flight a thread
                  ["        #pragma unroll 16"] if k.mapping == "thread" and cache == "smem" else  # few threads an SM
                  ["        #pragma unroll 8"] if k.mapping == "block" and rows < 64 else [])  # few blocks: latency rules
        return unroll + [f"        for (long long r = {lane}; r < {p.R}LL; r += {nl}) {{"] + body_lines + ["        }"]

    if C:  # a cluster per row
        lane, nl, row0, rstep = "threadIdx.x", "blockDim.x", f"(blockIdx.x / {C})", f"(gridDim.x / {C})"
    elif k.mapping == "block":
        lane, nl, row0, rstep = "threadIdx.x", "blockDim.x", "blockIdx.x", "gridDim.x"
    elif k.mapping == "warp":
        lane, nl = "(threadIdx.x & 31)", "32"
        row0, rstep = "(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5))", "(gridDim.x * (blockDim.x >> 5))"
    elif k.mapping == "cols":  # the row loop runs over tiles of 32 rows (see below); a warp a row-lane
        lane, nl, row0, rstep = "(threadIdx.x >> 5)", "(blockDim.x >> 5)", "", ""
    else:
        lane, nl = "0", "1"
        row0, rstep = "(blockIdx.x * blockDim.x + threadIdx.x)", "(gridDim.x * blockDim.x)"
    idx = f"((o * {p.R}LL + r) * {p.inner}LL + j)"
    if p.seg:
        if k.mapping != "block":
            raise Unsupported("a segmented row (a BatchNorm's channel) is read by a block")
        idx = f"((r / {p.seg}LL) * {p.inner * p.seg}LL + j * {p.seg}LL + r % {p.seg}LL)"
    parts = []
    pairs = welford_pairs(p) if k.welford else {}
    onl = online_pairs(p) if k.online else {}
    paired = set(pairs) | set(pairs.values()) | set(onl) | set(onl.values())
    plain = [ri for ri, r in enumerate(p.reductions) if ri not in paired and r.op not in ("argmax", "argmin")]
    runs = sibling_runs(p, plain) if cache == "none" and not C and k.mapping in ("block", "warp", "thread") else {}
    for ri, red in enumerate(p.reductions):
        if red.name in done:  # the second of a Welford or online pair, or a sibling: already computed
            continue
        if ri in runs:  # siblings: their bodies and steps in one loop over the row, then each one's merges
            code, steps = [], [f"            long long i = {idx};"]
            for rj in runs[ri]:
                em = Emitter(loader(False), special, prefix=f"a{rj}_")
                v = em.value(p.reductions[rj].args[0], "i")
                code.append(f"        float acc{rj} = {INIT[p.reductions[rj].op]};")
                steps += [em.take("            "), f"            acc{rj} = {combine(p.reductions[rj].op, f'acc{rj}', v)};"]
            code += row_loop(steps)
            for rj in runs[ri]:
                code += _plain_merge(p.reductions[rj].op, f"acc{rj}", k)
                done[p.reductions[rj].name] = f"acc{rj}"
            parts.append("\n".join(code))
            continue
        em = Emitter(loader(ri == 0), special, prefix=f"a{ri}_")
        v = em.value(red.args[0], "i")
        body = em.take("            ")
        if ri in onl:
            code = _online(k, ri, v, body, row_loop, idx)
            if C:
                code[-1:-1] = _cluster_merge("online", ri, C, [f"om{ri}", f"os{ri}"])
            parts.append("\n".join(code))
            done[red.name], done[p.reductions[onl[ri]].name] = f"acc{ri}", f"acc{ri}s"
            continue
        if ri in pairs:
            code = _welford(p, k, ri, v, body, row_loop, idx)
            if C:
                code[-1:-1] = _cluster_merge("welford", ri, C, [f"wc{ri}", f"wm{ri}", f"wq{ri}"])
            parts.append("\n".join(code))
            done[red.name], done[p.reductions[pairs[ri]].name] = f"acc{ri}", f"acc{ri}q"
            continue
        arg = red.op in ("argmax", "argmin")
        acc, ai = f"acc{ri}", f"ai{ri}"
        if arg:
            better = ">" if red.op == "argmax" else "<"
            step = arg_step(better, v, acc, ai)
            wcomb = (f"{{ float ov = __shfl_xor_sync(0xffffffffu, {acc}, s); long long oi = __shfl_xor_sync(0xffffffffu, {ai}, s);"
                     f" if {arg_takes(better, 'ov', 'oi', acc, ai)} {{ {acc} = ov; {ai} = oi; }} }}")
        else:
            step = f"{acc} = {combine(red.op, acc, v)};"
        code = [f"        float {acc} = {INIT[red.op]};" + (f" long long {ai} = 0;" if arg else "")]
        code += row_loop([f"            long long i = {idx};", body, f"            {step}"])
        if not arg:
            code += _plain_merge(red.op, acc, k)
            if C:
                code += _cluster_merge("plain", ri, C, [acc], red.op)
            done[red.name] = acc
            parts.append("\n".join(code))
            continue
        if k.mapping in ("block", "warp"):
            code.append(f"        for (int s = 16; s > 0; s >>= 1) {wcomb}")
        if k.mapping == "cols":
            code += [f"        scol[threadIdx.x] = {acc}; scidx[threadIdx.x] = {ai};", "        __syncthreads();",
                     f"        {acc} = scol[threadIdx.x & 31]; {ai} = scidx[threadIdx.x & 31];",
                     "        for (int w = 1; w < (blockDim.x >> 5); ++w) { const int t = w * 32 + (threadIdx.x & 31); "
                     f"if {arg_takes(better, 'scol[t]', 'scidx[t]', acc, ai)} {{ {acc} = scol[t]; {ai} = scidx[t]; }} }}",
                     "        __syncthreads();"]
        if k.mapping == "block":
            code += ["        if ((threadIdx.x & 31) == 0) { sred[threadIdx.x >> 5] = " + acc + "; sidx[threadIdx.x >> 5] = " + ai + "; }",
                     "        __syncthreads();",
                     f"        {acc} = sred[0]; {ai} = sidx[0];",
                     "        for (int w = 1; w < (blockDim.x >> 5); ++w) "
                     f"if {arg_takes(better, 'sred[w]', 'sidx[w]', acc, ai)} {{ {acc} = sred[w]; {ai} = sidx[w]; }}",
                     "        __syncthreads();"]
        done[red.name] = ai
        parts.append("\n".join(code))
    if p.full_output and (c4 or vec4 or k.ring) and out.dtype == "float32" and p.inner == 1:  # four results, one 16-byte store
        em = Emitter(loader(False), special, prefix="o_")
        v = em.value(out, "i")
        ob = em.take("            ")
        one = None if p.main is None else [  # a peeled row's odd elements (only the main input's rows are peeled)
            f"            long long i = {idx};", ob.replace("mv[u]", f"to_f({p.main.name}[i])"),
            f"            out[i] = {v.replace('mv[u]', f'to_f({p.main.name}[i])')};"]
        store = f"*reinterpret_cast<float4*>(out + o * {p.R}LL + r4) = ov4;"
        if k.ring and peel:  # a piece with a neighbour's elements: this slice's own, one by one
            store = (f"if (r4 >= r0 && r4 + 3 < r1) {store} else for (int u = 0; u < 4; ++u) "
                     f"if (r4 + u >= r0 && r4 + u < r1) out[o * {p.R}LL + r4 + u] = (&ov4.x)[u];")
        parts.append("\n".join(["        float4 ov4;"] + row_loop(
            [f"            long long i = {idx};", ob, f"            (&ov4.x)[u] = {v};"],
            (f"            {store}",), one, refill=True)))
    elif p.full_output:
        em = Emitter(loader(False), special, prefix="o_")
        v = em.value(out, "i")
        loop = row_loop([f"            long long i = {idx};", em.take("            "),
                         f"            out[i] = from_f<{CTYPE[out.dtype]}>({v});"])
        if k.mapping == "cols":  # a lane past the last row computed the last row's values only to take part in the merges
            loop = ["        if (live) {"] + loop + ["        }"]
        parts.append("\n".join(loop))
    else:
        if out.op in ("argmax", "argmin") and out.kind == "reduce":
            store = f"out[row] = {done[out.name]};"
            pre = ""
        else:
            em = Emitter(loader(False), special, prefix="o_")
            v = em.value(out, "row")
            pre = em.take("            ")
            store = f"out[row] = from_f<{CTYPE[out.dtype]}>({v});"
        first = f"{lane} == 0" + (" && rank == 0" if C else "") + (" && live" if k.mapping == "cols" else "")
        parts.append(f"        if ({first}) {{\n{pre}\n            {store}\n        }}")
    shared = ""
    if k.mapping == "block":
        shared = "    __shared__ float sred[32];\n"
        if onl:
            shared += "    __shared__ float sred2[32];\n"
        if pairs:
            shared += "    __shared__ float swc[32], swm[32], swq[32];\n"
        if any(r.op in ("argmax", "argmin") for r in p.reductions):
            shared += "    __shared__ long long sidx[32];\n"
        if cache == "smem":
            shared += "    extern __shared__ float srow[];\n"
    if k.mapping == "thread" and cache == "smem":
        shared = "    extern __shared__ float srow[];\n"
    if k.mapping == "cols":
        n_arr = 3 if pairs else 2 if onl else 1
        shared = "".join(f"    __shared__ float {a}[{k.block}];\n" for a in COLS[:n_arr])
        if any(r.op in ("argmax", "argmin") for r in p.reductions):
            shared += f"    __shared__ long long scidx[{k.block}];\n"
    if cache == "regs":
        shared += f"    float xr[{items}];\n"
    body = "\n".join(parts)
    if C:  # all shared arrays in the dynamic buffer (one layout for every block, so cluster_map finds them)
        Rc = _slice(p, C)
        shared = (f"    extern __shared__ __align__(16) unsigned char smem[];\n"
                  f"    float* srow = reinterpret_cast<float*>(smem);  // this block's slice of the row\n"
                  f"    float* sred = srow + {Rc + (4 if peel else 0)}; float* sred2 = sred + 32; float* swc = sred2 + 32; float* swm = swc + 32;\n"
                  f"    float* swq = swm + 32; float* cx = swq + 32;  // cx: the blocks' partial results, exchanged\n"
                  f"    (void)sred2; (void)swc; (void)swm; (void)swq;\n"
                  f"    const unsigned rank = cluster_rank();\n"
                  f"    const long long r0 = (long long)rank * {Rc}, r1 = min({p.R}LL, r0 + {Rc});\n")
        if k.ring:  # the chunks' barriers after the exchange slots; the first row's copies before the loop
            CH, x, total = 4 * k.block, p.main.name, p.outer * p.R
            shared += (f"    unsigned long long* cbar = reinterpret_cast<unsigned long long*>(cx + {3 * C * max(1, len(p.reductions))});\n"
                       f"    const auto fill = [&](int ch, long long rw) {{  // chunk ch of row rw's slice, by the copy engine\n"
                       f"        const long long s0 = rw * {p.R}LL + r0, g0 = s0 & ~3LL;  // from the 16-byte boundary at or before it\n"
                       f"        const long long a = (long long)ch * {CH}, span = r1 > r0 ? ((s0 - g0 + r1 - r0 + 3) & ~3LL) : 0;\n"
                       f"        const long long n = max(0LL, min(span - a, {CH}LL)), left = {total}LL - (g0 + a);\n"
                       f"        const long long nb = n <= left ? n : (left & ~3LL);  // no 16-byte piece past the tensor's end\n"
                       f"        for (long long e = nb; e < n && e < left; ++e) srow[a + e] = {x}[g0 + a + e];  // before the arrival\n"
                       f"        if (nb > 0) {{ mbar_expect(cbar + ch, (unsigned)(nb * 4));"
                       f" bulk_load(srow + a, {x} + g0 + a, (unsigned)(nb * 4), cbar + ch); }}\n"
                       f"        else mbar_arrive(cbar + ch);  // nothing to copy: the phase completes all the same\n"
                       f"    }};\n"
                       f"    if (threadIdx.x == 0) {{ for (int ch = 0; ch < {nch_ring}; ++ch) mbar_init(cbar + ch, 1); mbar_init_fence(); }}\n"
                       f"    __syncthreads();\n"
                       f"    if (threadIdx.x == 0 && {row0} < {rows}LL) for (int ch = 0; ch < {nch_ring}; ++ch) fill(ch, {row0});\n"
                       f"    unsigned ph = 0;  // the parity of this row's copies on every chunk's barrier\n")
            assert ring_waited, "a ring's rows are read in some pass"
        stage = ("        const long long sh = (o * %dLL + r0) & 3;  // the slice's start past a 16-byte boundary" % p.R
                 if k.ring else _stage(p, Rc, peel))
        flip = "\n        ph ^= 1u;" if k.ring else ""
        return f"""{PRELUDE}{CLUSTER_PRELUDE}{TMA_PRELUDE + BULK_PRELUDE if k.ring else ""}
extern "C" __global__ void __cluster_dims__({C}, 1, 1) __launch_bounds__({k.block}) egg_rows({args}) {{
{shared}    for (long long row = {row0}; row < {rows}LL; row += {rstep}) {{
        const long long o = row / {p.inner}LL, j = row % {p.inner}LL;
        (void)j;
{stage}
{body}
        cluster_sync();  // the exchange slots are free again for the next row{flip}
    }}
}}
"""
    if k.mapping == "cols":  # every thread runs every tile (the merges' barriers): a lane past the end repeats the last row
        return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_rows({args}) {{
{shared}    for (long long tile = blockIdx.x; tile < {-(-rows // 32)}LL; tile += gridDim.x) {{
        const long long rr = tile * 32 + (threadIdx.x & 31);
        const bool live = rr < {rows}LL;
        const long long row = live ? rr : {rows - 1}LL;
        const long long o = row / {p.inner}LL, j = row % {p.inner}LL;
{body}
    }}
}}
"""
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_rows({args}) {{
{shared}    for (long long row = {row0}; row < {rows}LL; row += {rstep}) {{
        const long long o = row / {p.inner}LL, j = row % {p.inner}LL;
{body}
    }}
}}
"""


def _plain_merge(op: str, acc: str, k: RowKnobs) -> list[str]:
    """A thread's partial `acc` of a plain reduction merged across the row's lanes, warps or a cols block's rows."""
    code = []
    if k.mapping in ("block", "warp"):
        code.append(f"        for (int s = 16; s > 0; s >>= 1) {acc} = {combine(op, acc, f'__shfl_xor_sync(0xffffffffu, {acc}, s)')};")
    if k.mapping == "cols":
        code += cols_merge([acc], lambda a, b: f"{a[0]} = {combine(op, a[0], b[0])};")
    if k.mapping == "block":
        code += ["        if ((threadIdx.x & 31) == 0) sred[threadIdx.x >> 5] = " + acc + ";",
                 "        __syncthreads();",
                 f"        {acc} = sred[0];",
                 f"        for (int w = 1; w < (blockDim.x >> 5); ++w) {acc} = {combine(op, acc, 'sred[w]')};",
                 "        __syncthreads();"]
    return code


def _stage(p: RowPlan, Rc: int, peel: bool = False) -> str:
    """The block's slice of the row into shared memory, 16 bytes a load where the row allows (the
    host checks the input's alignment), so the row is read from memory once. `peel`: rows that do
    not start on a 16-byte boundary: the slice sits `sh` elements into shared memory (its start's
    offset from a boundary), so the 16-byte pieces of memory land on 16-byte pieces there too."""
    x = p.main.name
    if peel:
        return f"""        const int sh = (int)((o * {p.R}LL + r0) & 3);
        {{
            const float* src = {x} + o * {p.R}LL;
            const long long a0 = min(r1, r0 + ((4 - sh) & 3)), a1 = a0 + ((r1 - a0) & ~3LL);
            for (long long r = r0 + threadIdx.x; r < a0; r += blockDim.x) srow[r - r0 + sh] = src[r];
            for (long long r = a1 + threadIdx.x; r < r1; r += blockDim.x) srow[r - r0 + sh] = src[r];
            #pragma unroll 4
            for (long long c = a0 + 4LL * threadIdx.x; c < a1; c += 4LL * blockDim.x)
                *reinterpret_cast<float4*>(srow + (c - r0 + sh)) = *reinterpret_cast<const float4*>(src + c);
        }}
        __syncthreads();"""
    if _float4_row(p):
        return f"""        {{
            const float4* src = reinterpret_cast<const float4*>({x} + o * {p.R}LL + r0);
            float4* dst = reinterpret_cast<float4*>(srow);
            const long long n4 = (r1 - r0) / 4;
            #pragma unroll 4
            for (long long c = threadIdx.x; c < n4; c += blockDim.x) dst[c] = src[c];
        }}
        __syncthreads();"""
    return f"""        #pragma unroll 4
        for (long long r = r0 + threadIdx.x; r < r1; r += blockDim.x) srow[r - r0] = to_f({x}[o * {p.R}LL + r]);
        __syncthreads();"""


def _float4_row(p: RowPlan) -> bool:
    """The main input's rows are whole 16-byte pieces: fp32, length a multiple of 4."""
    return p.main is not None and p.main.dtype == "float32" and p.R % 4 == 0


def _peeled(p: RowPlan) -> bool:
    """An fp32 main input whose rows are not whole 16-byte pieces (R % 4 != 0), long enough that
    reading its body 16 bytes at a time pays for the odd elements read one by one."""
    return p.main is not None and p.main.dtype == "float32" and p.R % 4 != 0 and p.R >= 64


def vectorizable(p: RowPlan, k: RowKnobs) -> bool:
    """16-byte reads of the main input (or of every core input): a contiguous fp32 row whose length is a
    multiple of 4, read where it lies (no cache), by a block or a warp."""
    rows16 = _float4_row(p) or _peeled(p) or (bool(p.cores) and p.R % 4 == 0)  # the cores: whole pieces only
    return p.inner == 1 and rows16 and k.cache == "none" and k.mapping in ("block", "warp")


def aligned16(p: RowPlan, k: RowKnobs) -> bool:
    """Whether the kernel reads the main input 16 bytes at a time (the host then checks its alignment)."""
    return (k.vec == 4 and vectorizable(p, k)) or (k.cache == "cluster" and (_float4_row(p) or _peeled(p)))


def grid(p: RowPlan, k: RowKnobs, sms: int, max_threads_per_sm: int) -> int:
    rows = p.outer * p.inner
    if k.cache == "cluster":  # a cluster per row, as many as fit at once times the waves
        return k.cluster * int(min(rows, max(1, sms // k.cluster) * k.waves))
    per_block = {"block": 1, "warp": k.block // 32, "thread": k.block, "cols": 32}[k.mapping]
    need = max(1, -(-rows // per_block))
    return int(min(need, sms * max(1, max_threads_per_sm // k.block) * k.waves))


def shared_bytes(p: RowPlan, k: RowKnobs) -> int:
    if k.cache == "cluster":
        return _cluster_floats(p, k.cluster, k.block if k.ring else 0) * 4
    if k.cache != "smem" or p.main is None or k.mapping not in ("block", "thread"):
        return 0
    return p.R * 4 * (k.block if k.mapping == "thread" else 1)  # a thread per row: every thread's row
