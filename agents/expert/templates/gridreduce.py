"""Reductions to a few outputs over very long rows (a loss or a norm over the whole tensor, a layer
norm over 4M elements a row): the row is split across many blocks.

For each reduction, in order (a later one may use an earlier one's value, as variance uses the mean):
`egg_grid_part<j>` — a grid of (parts x rows) blocks, each reducing its slice of a row (threads stride
through the slice, so loads coalesce; warp shuffles and shared memory finish the block) into one
partial; `egg_grid_fold<j>` — a block per row reducing that row's partials into the result. Then
`egg_grid_out` writes a full-size output (x / ||x||, a normalized tensor) in one grid-stride pass, or
the last fold writes the few outputs itself. Partials and results live in a workspace the host
allocates per call. Deterministic: no atomics."""
from __future__ import annotations

from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import OpGraph, Unsupported
from agents.expert.templates.rowwise import INIT, RowPlan, chan_merge, welford_lanes, welford_pairs, welford_update, welford_warps


@dataclass
class GridKnobs:
    block: int = 256
    parts: int = 1056  # blocks over all rows, per reduction (8 waves of 132 SMs)
    out_waves: int = 8  # the full-output pass: grid = SMs x blocks per SM x waves
    welford: bool = True  # a mean and its centred sum of squares in one part/fold pair (see rowwise)


def _pairs(p: RowPlan, k: GridKnobs) -> dict[int, int]:
    """Welford pairs, but not one that ends a few-output program (its fold writes the output itself)."""
    last = len(p.reductions) - 1
    return {i: j for i, j in (welford_pairs(p) if k.welford else {}).items() if p.full_output or j != last}


def check_grid(p: RowPlan) -> RowPlan:
    """The row plan (rowwise.plan_rows(g, grid_ok=True)) if this template can take it."""
    if p.inner != 1:
        raise Unsupported("a grid-level reduction over non-trailing dims")
    if any(r.op not in ("sum", "amax", "amin") for r in p.reductions):
        raise Unsupported(f"a grid-level {', '.join(r.op for r in p.reductions)}")
    return p


def parts_per_row(p: RowPlan, k: GridKnobs) -> int:
    return max(1, min(k.parts // max(1, p.outer), -(-p.R // (k.block * 4))))


def _comb(op: str, a: str, b: str) -> str:
    return {"sum": f"{a} + {b}", "amax": f"fmaxf({a}, {b})", "amin": f"fminf({a}, {b})"}[op]


def _block_reduce(op: str, acc: str) -> str:
    """Reduce `acc` over the block; the result lands in `acc` of every thread."""
    return f"""        for (int s = 16; s > 0; s >>= 1) {acc} = {_comb(op, acc, f"__shfl_xor_sync(0xffffffffu, {acc}, s)")};
        if ((threadIdx.x & 31) == 0) g_red[threadIdx.x >> 5] = {acc};
        __syncthreads();
        {acc} = g_red[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {acc} = {_comb(op, acc, "g_red[w]")};
        __syncthreads();"""


def render(g: OpGraph, p: RowPlan, k: GridKnobs) -> str:
    out, rows, R = g.output, p.outer, p.R
    P = parts_per_row(p, k)
    tensors = g.inputs + g.params
    ins = ", ".join(f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors)
    ws = "float* __restrict__ g_part, float* __restrict__ g_res"
    done: dict[str, str] = {}  # reduction -> where its result is read: g_res[j * rows + row]
    kernels = []
    pairs = _pairs(p, k)
    for j, red in enumerate(p.reductions):
        if red.name in done:  # the second of a Welford pair
            continue
        em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: done.get(n.name), prefix=f"a{j}_")
        v = em.value(red.args[0], "i")
        body = em.take("            ")
        if j in pairs:
            j2 = pairs[j]
            kernels += _welford_kernels(p, k, j, j2, v, body, ws, ins, P, rows, R)
            done[red.name], done[p.reductions[j2].name] = f"g_res[{j} * {rows}LL + row]", f"g_res[{j2} * {rows}LL + row]"
            continue
        kernels.append(f"""extern "C" __global__ void __launch_bounds__({k.block}) egg_grid_part{j}({ws}, {ins}) {{
    __shared__ float g_red[32];
    const long long row = blockIdx.y, part = blockIdx.x;
    const long long lo = part * {-(-R // P)}LL, hi = lo + {-(-R // P)}LL < {R}LL ? lo + {-(-R // P)}LL : {R}LL;
    float acc = {INIT[red.op]};
    for (long long r = lo + threadIdx.x; r < hi; r += blockDim.x) {{
            const long long i = row * {R}LL + r;
{body}
            acc = {_comb(red.op, "acc", v)};
    }}
{_block_reduce(red.op, "acc")}
    if (threadIdx.x == 0) g_part[row * {P}LL + part] = acc;
}}""")
        done[red.name] = f"g_res[{j} * {rows}LL + row]"
        last = j == len(p.reductions) - 1
        tail = ""
        if last and not p.full_output:
            em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: done.get(n.name), prefix="o_")
            vo = em.value(out, "row")
            tail = f"""
    if (threadIdx.x == 0) {{
{em.take("        ")}
        out[row] = from_f<{CTYPE[out.dtype]}>({vo});
    }}"""
        sig = f"{CTYPE[out.dtype]}* __restrict__ out, {ws}, {ins}" if last and not p.full_output else f"{ws}, {ins}"
        kernels.append(f"""extern "C" __global__ void __launch_bounds__({k.block}) egg_grid_fold{j}({sig}) {{
    __shared__ float g_red[32];
    const long long row = blockIdx.x;
    float acc = {INIT[red.op]};
    for (long long q = threadIdx.x; q < {P}LL; q += blockDim.x) acc = {_comb(red.op, "acc", f"g_part[row * {P}LL + q]")};
{_block_reduce(red.op, "acc")}
    if (threadIdx.x == 0) g_res[{j} * {rows}LL + row] = acc;
    __syncthreads();{tail}
}}""")
    if p.full_output:
        em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: done.get(n.name), prefix="o_")
        vo = em.value(out, "i")
        kernels.append(f"""extern "C" __global__ void __launch_bounds__({k.block}) egg_grid_out({CTYPE[out.dtype]}* __restrict__ out, {ws}, {ins}) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < {rows * R}LL; i += (long long)gridDim.x * blockDim.x) {{
        const long long row = i / {R}LL;
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


def _welford_kernels(p: RowPlan, k: GridKnobs, j: int, j2: int, v: str, body: str, ws: str, ins: str, P: int,
                     rows: int, R: int) -> list[str]:
    """Reductions j (a sum) and j2 (the centred sum of squares after it) in one part/fold pair: each part
    keeps (count, mean, M2) (three floats in the workspace), the fold merges them."""
    shared = "    __shared__ float g_wc[32], g_wm[32], g_wq[32];"
    part = f"""extern "C" __global__ void __launch_bounds__({k.block}) egg_grid_part{j}({ws}, {ins}) {{
{shared}
    const long long row = blockIdx.y, part = blockIdx.x;
    const long long lo = part * {-(-R // P)}LL, hi = lo + {-(-R // P)}LL < {R}LL ? lo + {-(-R // P)}LL : {R}LL;
    float wc = 0.0f, wm = 0.0f, wq = 0.0f;
    for (long long r = lo + threadIdx.x; r < hi; r += blockDim.x) {{
            const long long i = row * {R}LL + r;
{body}
            {welford_update("wc", "wm", "wq", v)}
    }}
{_welford_block()}
    if (threadIdx.x == 0) {{
        const long long q = (row * {P}LL + part) * 3;
        g_part[q] = wc; g_part[q + 1] = wm; g_part[q + 2] = wq;
    }}
}}"""
    fold = f"""extern "C" __global__ void __launch_bounds__({k.block}) egg_grid_fold{j}({ws}, {ins}) {{
{shared}
    const long long row = blockIdx.x;
    float wc = 0.0f, wm = 0.0f, wq = 0.0f;
    for (long long q = threadIdx.x; q < {P}LL; q += blockDim.x) {{
        const float* t = g_part + (row * {P}LL + q) * 3;
        {chan_merge("wc", "wm", "wq", "t[0]", "t[1]", "t[2]")}
    }}
{_welford_block()}
    if (threadIdx.x == 0) {{ g_res[{j} * {rows}LL + row] = wm * wc; g_res[{j2} * {rows}LL + row] = wq; }}
}}"""
    return [part, fold]


def workspace(p: RowPlan, k: GridKnobs) -> tuple[int, int]:
    """Floats of the workspace: the partials of every row (three a part for a Welford pair), then one
    result per reduction and row."""
    return p.outer * parts_per_row(p, k) * (3 if _pairs(p, k) else 1), len(p.reductions) * p.outer


def launches(p: RowPlan, k: GridKnobs, sms: int, max_threads_per_sm: int) -> list[tuple[str, tuple, bool]]:
    """(kernel, grid, takes out) in order."""
    P = parts_per_row(p, k)
    seq = []
    skip = set(_pairs(p, k).values())
    for j in range(len(p.reductions)):
        if j in skip:
            continue
        last = j == len(p.reductions) - 1
        seq += [(f"egg_grid_part{j}", (P, p.outer), False), (f"egg_grid_fold{j}", (p.outer,), last and not p.full_output)]
    if p.full_output:
        need = -(-p.outer * p.R // k.block)
        seq.append(("egg_grid_out", (min(need, sms * max(1, max_threads_per_sm // k.block) * k.out_waves),), True))
    return seq


def kernel_names(p: RowPlan, k: GridKnobs | None = None) -> list[str]:
    skip = set(_pairs(p, k or GridKnobs()).values())
    names = [f"egg_grid_{w}{j}" for j in range(len(p.reductions)) if j not in skip for w in ("part", "fold")]
    return names + (["egg_grid_out"] if p.full_output else [])

