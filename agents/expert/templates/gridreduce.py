"""Reductions to a few outputs over very long rows (a loss or a norm over the whole tensor, a layer
norm over 4M elements a row, a BatchNorm's channel over a large batch): the row is split across many
blocks.

For each reduction, in order (a later one may use an earlier one's value, as variance uses the mean):
`egg_grid_part<j>` — a grid of (parts x rows) blocks, each reducing its slice of a row (threads stride
through the slice, so loads coalesce; warp shuffles and shared memory finish the block) into one
partial; `egg_grid_fold<j>` — a block per row reducing that row's partials into the result. Then
`egg_grid_out` writes a full-size output (x / ||x||, a normalized tensor) in one grid-stride pass, or
the last fold writes the few outputs itself. Each kernel writes one buffer of its own (a pass's partials,
a pass's results), so the launches are ordinary steps of a program: a grid-level BatchNorm after a conv
is a stage like any other. Deterministic: no atomics."""
from __future__ import annotations

from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import Node, OpGraph, Unsupported
from agents.expert.templates.pointwise import vector_reads
from agents.expert.templates.rowwise import INIT, RowPlan, chan_merge, combine, welford_lanes, welford_pairs, welford_update, welford_warps


@dataclass
class GridKnobs:
    block: int = 256
    parts: int = 1056  # blocks over all rows, per reduction (8 waves of 132 SMs)
    out_waves: int = 8  # the full-output pass: grid = SMs x blocks per SM x waves
    welford: bool = True  # a mean and its centred sum of squares in one part/fold pair (see rowwise)
    vec: int = 1  # 4: the passes over the rows read (and the output pass writes) 16-byte vectors (vec_ok)


def _pairs(p: RowPlan, k: GridKnobs) -> dict[int, int]:
    """Welford pairs, but not one that ends a few-output program (its fold writes the output itself)."""
    last = len(p.reductions) - 1
    return {i: j for i, j in (welford_pairs(p) if k.welford else {}).items() if p.full_output or j != last}


def welford_pairs_of(p: RowPlan, params: dict) -> dict[int, int]:
    """The Welford pairs a candidate with these knobs computes in one pass."""
    return _pairs(p, GridKnobs(welford=params.get("welford", True)))


def rows(p: RowPlan) -> int:
    """Rows (outputs of each reduction): a segmented row's are the dims between its runs (channels)."""
    return p.outer * p.inner if p.seg else p.outer


def check_grid(p: RowPlan) -> RowPlan:
    """The row plan (rowwise.plan_rows(g, grid_ok=True)) if this template can take it."""
    if p.inner != 1 and not p.seg:
        raise Unsupported("a grid-level reduction over non-trailing dims")
    if any(r.op not in ("sum", "amax", "amin") for r in p.reductions):
        raise Unsupported(f"a grid-level {', '.join(r.op for r in p.reductions)}")
    return p


def parts_per_row(p: RowPlan, k: GridKnobs) -> int:
    return max(1, min(k.parts // max(1, rows(p)), -(-p.R // (k.block * 4))))


def vec_ok(g: OpGraph, p: RowPlan) -> bool:
    """16-byte vectors in the passes: fp32 throughout, rows a multiple of 4 long, so a part's slice (rounded to 4)
    and the output start on 16-byte boundaries (the host asserts its inputs do); a segmented row (a BatchNorm's
    channel) with runs a multiple of 4 long, so no vector spans two runs."""
    return (p.R % 4 == 0 and (not p.seg or p.seg % 4 == 0) and g.output.dtype == "float32"
            and all(t.dtype == "float32" for t in g.inputs + g.params))


def _chunk(p: RowPlan, k: GridKnobs) -> int:
    """Elements of a row a part reduces (a multiple of 4 with vectors)."""
    c = -(-p.R // parts_per_row(p, k))
    return -(-c // 4) * 4 if k.vec > 1 else c


def _slice_loop(p: RowPlan, k: GridKnobs, loads: str, body: str, update: str) -> str:
    """A part's loop over its slice of the row (lo, hi): each element's statements `body`, then `update` with its
    value; with vectors, a float4 of each tensor read at the element's own index (`loads`) feeds four elements."""
    if k.vec > 1:
        return f"""    for (long long r4 = lo + 4 * threadIdx.x; r4 < hi; r4 += 4 * blockDim.x) {{
        {_element(p, "r4", "i4")}
{loads}
        #pragma unroll
        for (int e = 0; e < 4; ++e) {{
            const long long i = i4 + e;
{body}
            {update}
        }}
    }}"""
    return f"""    for (long long r = lo + threadIdx.x; r < hi; r += blockDim.x) {{
            {_element(p)}
{body}
            {update}
    }}"""


def _block_reduce(op: str, acc: str) -> str:
    """Reduce `acc` over the block; the result lands in `acc` of every thread."""
    return f"""        for (int s = 16; s > 0; s >>= 1) {acc} = {combine(op, acc, f"__shfl_xor_sync(0xffffffffu, {acc}, s)")};
        if ((threadIdx.x & 31) == 0) g_red[threadIdx.x >> 5] = {acc};
        __syncthreads();
        {acc} = g_red[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {acc} = {combine(op, acc, "g_red[w]")};
        __syncthreads();"""


def _element(p: RowPlan, r: str = "r", i: str = "i") -> str:
    """The flat index `i` of element r of row `row`. A segmented row's elements come in runs of `seg`,
    `inner * seg` apart: its run and offset in 32 bits where the row allows (a 64-bit divide by a
    constant is a dozen instructions an element of a pass at memory speed)."""
    if not p.seg:
        return f"const long long {i} = row * {p.R}LL + {r};"
    if p.R < (1 << 32):
        return (f"const unsigned ru = (unsigned){r}; const long long {i} = (long long)(ru / {p.seg}u) * {p.inner * p.seg}LL"
                f" + row * {p.seg}LL + ru % {p.seg}u;")
    return f"const long long {i} = ({r} / {p.seg}LL) * {p.inner * p.seg}LL + row * {p.seg}LL + {r} % {p.seg}LL;"


def _row_of(p: RowPlan, total: int) -> str:
    """The row of flat element `i` in the full-output pass (unsigned 32-bit where the tensor allows)."""
    if total < (1 << 32):
        return ("const unsigned iu = (unsigned)i; const long long row = "
                + (f"(iu / {p.seg}u) % {p.inner}u;" if p.seg else f"iu / {p.R}u;"))
    return "const long long row = " + (f"(i / {p.seg}LL) % {p.inner}LL;" if p.seg else f"i / {p.R}LL;")


@dataclass
class _Pass:
    """One part/fold pair: the reduction(s) it computes and the names of its buffers."""
    j: int
    j2: int | None  # the centred sum of squares of a Welford pair
    part: Node
    res: Node | None  # None: the last fold writes the output


def _passes(g: OpGraph, p: RowPlan, k: GridKnobs) -> list[_Pass]:
    pairs, P, R_ = _pairs(p, k), parts_per_row(p, k), rows(p)
    skip, out = set(pairs.values()), []
    for j, red in enumerate(p.reductions):
        if j in skip:
            continue
        j2 = pairs.get(j)
        per = 3 if j2 is not None else 1
        last = j == len(p.reductions) - 1 and not p.full_output
        out.append(_Pass(j, j2, Node(f"{red.name}_gpart", "input", shape=(R_ * P * per,), dtype="float32"),
                         None if last else Node(f"{red.name}_gres", "input", shape=((2 if j2 is not None else 1) * R_,),
                                                dtype="float32")))
    return out


def render(g: OpGraph, p: RowPlan, k: GridKnobs) -> str:
    out, R, nrows = g.output, p.R, rows(p)
    P = parts_per_row(p, k)
    tensors = g.inputs + g.params
    ins = ", ".join(f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors)
    done: dict[str, str] = {}  # reduction -> where its result is read
    head = f'extern "C" __global__ void __launch_bounds__({k.block})'
    kernels, earlier = [], []  # earlier: the result buffers of the passes before, as kernel parameters
    chunk = _chunk(p, k)
    span = f"""    const long long row = blockIdx.y, part = blockIdx.x;
    const long long lo = part * {chunk}LL, hi = lo + {chunk}LL < {R}LL ? lo + {chunk}LL : {R}LL;"""
    for ps in _passes(g, p, k):
        j, red = ps.j, p.reductions[ps.j]
        rest = ", ".join([ins] + earlier)
        pre = f"a{j}_"
        if k.vec > 1:
            # each tensor read at the element's own index a float4 at a time (pointwise.vector_reads), the rest
            # (a broadcast, an earlier pass's result) per element
            loads, body, v = vector_reads(lambda f, pre=pre: Emitter(f, lambda n: done.get(n.name), prefix=pre), red.args[0],
                                          tensors, "float4", "i4 / 4")
        else:
            em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: done.get(n.name), prefix=pre)
            v, loads = em.value(red.args[0], "i"), ""
            body = em.take("            ")
        if ps.j2 is not None:
            kernels += _welford_kernels(j, span, _slice_loop(p, k, loads, body, welford_update("wc", "wm", "wq", v)), rest, P,
                                        nrows, k.block)
            done[red.name], done[p.reductions[ps.j2].name] = f"g_res{j}[row]", f"g_res{j}[{nrows}LL + row]"
            earlier.append(f"const float* __restrict__ g_res{j}")
            continue
        kernels.append(f"""{head} egg_grid_part{j}(float* __restrict__ g_part, {rest}) {{
    __shared__ float g_red[32];
{span}
    float acc = {INIT[red.op]};
{_slice_loop(p, k, loads, body, f"acc = {combine(red.op, 'acc', v)};")}
{_block_reduce(red.op, "acc")}
    if (threadIdx.x == 0) g_part[row * {P}LL + part] = acc;
}}""")
        fold = f"""    __shared__ float g_red[32];
    const long long row = blockIdx.x;
    float acc = {INIT[red.op]};
    for (long long q = threadIdx.x; q < {P}LL; q += blockDim.x) acc = {combine(red.op, "acc", f"g_part[row * {P}LL + q]")};
{_block_reduce(red.op, "acc")}"""
        if ps.res is None:  # the last fold writes the few outputs
            done[red.name] = "acc"
            em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: done.get(n.name), prefix="o_")
            vo = em.value(out, "row")
            kernels.append(f"""{head} egg_grid_fold{j}({CTYPE[out.dtype]}* __restrict__ out, const float* __restrict__ g_part, {rest}) {{
{fold}
    if (threadIdx.x == 0) {{
{em.take("        ")}
        out[row] = from_f<{CTYPE[out.dtype]}>({vo});
    }}
}}""")
            continue
        kernels.append(f"""{head} egg_grid_fold{j}(float* __restrict__ g_res{j}, const float* __restrict__ g_part, {rest}) {{
{fold}
    if (threadIdx.x == 0) g_res{j}[row] = acc;
}}""")
        done[red.name] = f"g_res{j}[row]"
        earlier.append(f"const float* __restrict__ g_res{j}")
    if p.full_output and k.vec > 1:  # the pointwise template's vector loop, the row of each element from its index
        total = nrows * R
        loads, body, vo = vector_reads(lambda f: Emitter(f, lambda n: done.get(n.name), prefix="o_"), out, tensors,
                                       "float4", "i4 / 4")
        kernels.append(f"""{head} egg_grid_out({CTYPE[out.dtype]}* __restrict__ out, {", ".join([ins] + earlier)}) {{
    for (long long vi = (long long)blockIdx.x * blockDim.x + threadIdx.x; vi < {total // 4}LL; vi += (long long)gridDim.x * blockDim.x) {{
        const long long i4 = vi * 4;
{loads}
        float4 R_;
        #pragma unroll
        for (int e = 0; e < 4; ++e) {{
            const long long i = i4 + e;
            {_row_of(p, total)}
{body}
            reinterpret_cast<float*>(&R_)[e] = {vo};
        }}
        reinterpret_cast<float4*>(out)[vi] = R_;
    }}
}}""")
    elif p.full_output:
        em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: done.get(n.name), prefix="o_")
        vo = em.value(out, "i")
        total = nrows * R
        kernels.append(f"""{head} egg_grid_out({CTYPE[out.dtype]}* __restrict__ out, {", ".join([ins] + earlier)}) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < {total}LL; i += (long long)gridDim.x * blockDim.x) {{
        {_row_of(p, total)}
{em.take("        ")}
        out[i] = from_f<{CTYPE[out.dtype]}>({vo});
    }}
}}""")
    return PRELUDE + "\n" + "\n".join(kernels) + "\n"


def _welford_block(indent: str = "    ") -> str:
    """Merge (wc, wm, wq) over the block (Chan's rule); every thread ends with the block's triple."""
    lines = [welford_lanes("wc", "wm", "wq")] + welford_warps("wc", "wm", "wq", ("g_wc", "g_wm", "g_wq"),
                                                               "(int)(blockDim.x >> 5)")
    return "\n".join(indent + ln for ln in lines)


def _welford_kernels(j: int, span: str, loop: str, rest: str, P: int, nrows: int, block: int) -> list[str]:
    """Reduction j (a sum) and the centred sum of squares after it in one part/fold pair: each part keeps
    (count, mean, M2) (three floats of its buffer), the fold merges them into the row's sum and M2
    (`g_res<j>[row]`, `g_res<j>[rows + row]`)."""
    shared = "    __shared__ float g_wc[32], g_wm[32], g_wq[32];"
    part = f"""extern "C" __global__ void __launch_bounds__({block}) egg_grid_part{j}(float* __restrict__ g_part, {rest}) {{
{shared}
{span}
    float wc = 0.0f, wm = 0.0f, wq = 0.0f;
{loop}
{_welford_block()}
    if (threadIdx.x == 0) {{
        const long long q = (row * {P}LL + part) * 3;
        g_part[q] = wc; g_part[q + 1] = wm; g_part[q + 2] = wq;
    }}
}}"""
    fold = f"""extern "C" __global__ void __launch_bounds__({block}) egg_grid_fold{j}(float* __restrict__ g_res{j}, const float* __restrict__ g_part, {rest}) {{
{shared}
    const long long row = blockIdx.x;
    float wc = 0.0f, wm = 0.0f, wq = 0.0f;
    for (long long q = threadIdx.x; q < {P}LL; q += blockDim.x) {{
        const float* t = g_part + (row * {P}LL + q) * 3;
        {chan_merge("wc", "wm", "wq", "t[0]", "t[1]", "t[2]")}
    }}
{_welford_block()}
    if (threadIdx.x == 0) {{ g_res{j}[row] = wm * wc; g_res{j}[{nrows}LL + row] = wq; }}
}}"""
    return [part, fold]


def launches(g: OpGraph, p: RowPlan, k: GridKnobs, sms: int, max_threads_per_sm: int) -> list[tuple[str, tuple, tuple, list, Node | None]]:
    """(kernel, grid, block, tensors after the one it writes, the node it writes; None: the output), in order."""
    P, nrows, leaves = parts_per_row(p, k), rows(p), g.inputs + g.params
    seq, earlier = [], []
    for ps in _passes(g, p, k):
        seq += [(f"egg_grid_part{ps.j}", (P, nrows), (k.block,), leaves + earlier, ps.part),
                (f"egg_grid_fold{ps.j}", (nrows,), (k.block,), [ps.part] + leaves + earlier, ps.res)]
        if ps.res is not None:
            earlier.append(ps.res)
    if p.full_output:
        need = -(-nrows * p.R // (k.block * k.vec))
        seq.append(("egg_grid_out", (min(need, sms * max(1, max_threads_per_sm // k.block) * k.out_waves),), (k.block,),
                    leaves + earlier, None))
    return seq


def kernel_names(g: OpGraph, p: RowPlan, k: GridKnobs | None = None) -> list[str]:
    return [s[0] for s in launches(g, p, k or GridKnobs(), 1, 1024)]
