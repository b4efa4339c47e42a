"""Scans (cumsum, cumprod; forward or from the end) along one dim, with the pointwise chain before
the scan (e.g. x * mask) read in and the one after it applied before the store.

The tensor is viewed as (outer, L, inner). Scanning along the last dim (inner == 1): a block per
row walks the row in tiles of block x items elements: a coalesced load into shared memory, each
thread scans its own `items` consecutive elements, a warp-shuffle scan of the thread totals and one
of the warp totals give each thread its prefix, then a coalesced store; the tile's total carries
into the next tile. Along another dim (inner > 1): a thread per (outer, inner) column walks L,
neighbouring threads reading neighbouring addresses."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import Node, OpGraph, Unsupported, check_elementwise_after

# the mask of a masked scan is a bool tensor; declared here so other templates' code is unchanged
BOOL_PRELUDE = "__device__ __forceinline__ float to_f(bool x) { return x ? 1.0f : 0.0f; }\n"
IDENT = {"cumsum": "0.0f", "cumprod": "1.0f"}
MAX_TILE = 8192  # block x items elements of shared memory (32 KiB): static shared memory stays under 48 KiB


@dataclass
class ScanPlan:
    scan: Node
    outer: int
    L: int
    inner: int


@dataclass
class ScanKnobs:
    block: int = 256
    items: int = 8  # consecutive elements a thread scans itself (inner == 1)
    waves: int = 8  # grid = min(rows, SMs x blocks per SM x waves)


def plan_scan(g: OpGraph) -> ScanPlan:
    scans = [n for n in g.nodes if n.kind == "scan"]
    if len(scans) != 1:
        raise Unsupported(f"{len(scans)} scans in one task")
    s = scans[0]
    check_elementwise_after(g, [s], "scan")
    if any(n.kind in ("reduce", "gemm") for n in g.nodes):
        raise Unsupported("a scan beside a reduction or matmul")
    if tuple(g.output.shape) != tuple(s.shape):
        raise Unsupported(f"output shape {g.output.shape} is not the scanned shape {s.shape}")
    (d,) = s.dims
    shape = tuple(s.shape)
    return ScanPlan(s, math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:]))


def _op(kind: str, a: str, b: str) -> str:
    return f"({a} + {b})" if kind == "cumsum" else f"({a} * {b})"


def render(g: OpGraph, p: ScanPlan, k: ScanKnobs) -> str:
    s, out = p.scan, g.output
    tensors = g.inputs + g.params
    args = ", ".join([f"{CTYPE[out.dtype]}* __restrict__ out"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors])
    pre = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", prefix="a")
    v_in = pre.value(s.args[0], "i")
    post = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n: "s_val" if n is s else None, prefix="o")
    v_out = post.value(out, "i")
    ident, L = IDENT[s.op], p.L
    pos = f"({L}LL - 1 - q)" if s.reverse else "q"
    ot = CTYPE[out.dtype]
    excl = bool(s.attrs.get("exclusive"))  # the prefix before each element (cat(identity, scan(x[:-1])))
    step = (f"            const float s_val = s_run;\n            s_run = {_op(s.op, 's_run', v_in)};" if excl else
            f"            s_run = {_op(s.op, 's_run', v_in)};\n            const float s_val = s_run;")
    if p.inner > 1:
        body = f"""    for (long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x; col < {p.outer * p.inner}LL;
         col += (long long)gridDim.x * blockDim.x) {{
        const long long o = col / {p.inner}LL, j = col % {p.inner}LL;
        float s_run = {ident};
        for (long long q = 0; q < {L}LL; ++q) {{
            const long long i = (o * {L}LL + {pos}) * {p.inner}LL + j;
{pre.take("            ")}
{step}
{post.take("            ")}
            out[i] = from_f<{ot}>({v_out});
        }}
    }}"""
        return f"{PRELUDE}{BOOL_PRELUDE}\nextern \"C\" __global__ void __launch_bounds__({k.block}) egg_scan({args}) {{\n{body}\n}}\n"
    T, IT = k.block, k.items
    if T % 32 or T * IT > MAX_TILE:
        raise Unsupported("scan s_tile shape")
    NW = T // 32
    upd = f"s_run = {_op(s.op, 's_run', f's_tile[tid * {IT} + e]')};"
    loc = (f"                s_loc[e] = s_run;\n                {upd}" if excl else
           f"                {upd}\n                s_loc[e] = s_run;")
    body = f"""    __shared__ float s_tile[{T * IT}];
    __shared__ float s_wsum[32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (long long o = blockIdx.x; o < {p.outer}LL; o += gridDim.x) {{
        float s_carry = {ident};
        for (long long t0 = 0; t0 < {L}LL; t0 += {T * IT}) {{
            #pragma unroll
            for (int e = 0; e < {IT}; ++e) {{  // coalesced: logical position t0 + e * T + tid
                const long long q = t0 + e * {T} + tid;
                float v = {ident};
                if (q < {L}LL) {{
                    const long long i = o * {L}LL + {pos};
{pre.take("                    ")}
                    v = {v_in};
                }}
                s_tile[e * {T} + tid] = v;
            }}
            __syncthreads();
            float s_loc[{IT}];
            float s_run = {ident};
            #pragma unroll
            for (int e = 0; e < {IT}; ++e) {{  // this thread's consecutive elements
{loc}
            }}
            float s_x = s_run;  // inclusive scan of the thread totals within the warp
            #pragma unroll
            for (int d = 1; d < 32; d <<= 1) {{
                const float s_y = __shfl_up_sync(0xffffffffu, s_x, d);
                if (lane >= d) s_x = {_op(s.op, "s_x", "s_y")};
            }}
            float s_excl = __shfl_up_sync(0xffffffffu, s_x, 1);
            if (lane == 0) s_excl = {ident};
            if (lane == 31) s_wsum[warp] = s_x;
            __syncthreads();
            if (warp == 0) {{  // inclusive scan of the warp totals
                float s_w = lane < {NW} ? s_wsum[lane] : {ident};
                #pragma unroll
                for (int d = 1; d < 32; d <<= 1) {{
                    const float s_y = __shfl_up_sync(0xffffffffu, s_w, d);
                    if (lane >= d) s_w = {_op(s.op, "s_w", "s_y")};
                }}
                if (lane < {NW}) s_wsum[lane] = s_w;
            }}
            __syncthreads();
            const float s_before = {_op(s.op, "s_carry", _op(s.op, f"(warp > 0 ? s_wsum[warp - 1] : {ident})", "s_excl"))};
            #pragma unroll
            for (int e = 0; e < {IT}; ++e) s_tile[tid * {IT} + e] = {_op(s.op, "s_before", "s_loc[e]")};
            s_carry = {_op(s.op, "s_carry", f"s_wsum[{NW - 1}]")};
            __syncthreads();
            #pragma unroll
            for (int e = 0; e < {IT}; ++e) {{
                const long long q = t0 + e * {T} + tid;
                if (q < {L}LL) {{
                    const long long i = o * {L}LL + {pos};
                    const float s_val = s_tile[e * {T} + tid];
{post.take("                    ")}
                    out[i] = from_f<{ot}>({v_out});
                }}
            }}
            __syncthreads();  // the next s_tile overwrites s_tile[] and s_wsum[]
        }}
    }}"""
    return f"{PRELUDE}{BOOL_PRELUDE}\nextern \"C\" __global__ void __launch_bounds__({T}) egg_scan({args}) {{\n{body}\n}}\n"


def grid(p: ScanPlan, k: ScanKnobs, sms: int, max_threads_per_sm: int) -> int:
    rows = p.outer if p.inner == 1 else -(-p.outer * p.inner // k.block)
    return int(max(1, min(rows, sms * max(1, max_threads_per_sm // k.block) * k.waves)))
