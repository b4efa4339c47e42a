"""A reduction over a middle dim (inner > 1: KernelBench 47-53, sum/mean/max/min/argmax/argmin over dim 1 of
(128, 4096, 4095)), the rows family's `tcols` mapping: a thread takes TC outputs 32 apart, so a warp reads
32 x TC consecutive columns of each reduced row back to back.

Why not a thread an output (the `thread` mapping): a warp then reads 128 bytes a row, off the 32-byte sectors
(rows of 4095 floats), and the sector two warps share is read by each at its own time; over 4096 rows the
warps drift apart and L2 has let it go before the second asks. Measured (ncu, H100, 2026-12-07): DRAM read
1.21x the tensor, 3.65 ms against eager's 3.02, whose threads take 4 outputs 32 apart (DRAM 1.00x). Here a
warp's TC loads of a row share their sectors with each other, issued together.

Only the plain case: one reduction of the one input (a pointwise chain before and after it allowed), no
parameters; anything else stays on the general mappings."""
from __future__ import annotations

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import OpGraph
from agents.expert.templates.rowwise import INIT, arg_step, arg_takes, combine

TC = 4  # outputs a thread, 32 apart (eager's 4)


def reason(g: OpGraph, p) -> str | None:
    """Why this mapping does not apply to plan `p` (a RowPlan), or None."""
    if p.seg or p.inner == 1:
        return "not a reduction over a middle dim"
    if p.full_output:
        return "an output of the input's size"
    if len(p.reductions) != 1:
        return "several reductions"
    if g.params or len(g.inputs) != 1 or p.main is None:
        return "inputs besides the reduced one"
    return None


def fills(p, sms: int) -> bool:
    """Enough outputs for 8 warps an SM at TC a thread (a quarter of a thread a row's threads): below that the
    first design keeps a thread a row, whose extra threads have more loads in flight."""
    return p.outer * p.inner >= 8 * sms * 32 * TC


def render(g: OpGraph, p, k) -> str:
    red, out = p.reductions[0], g.output
    args = ", ".join([f"{CTYPE[out.dtype]}* __restrict__ out", f"const {CTYPE[p.main.dtype]}* __restrict__ {p.main.name}"])
    N, R, inner = p.outer * p.inner, p.R, p.inner
    arg = red.op in ("argmax", "argmin")
    better = ">" if red.op == "argmax" else "<"
    Y = k.block // 32 if k.split else 1  # warps splitting a group's rows
    head, loop, merge, store = [], [], [], []
    for s in range(TC):
        # a lane past the last output reads the last one's column (its loads stay in bounds) and stores nothing
        head += [f"        const long long row{s} = wg * {32 * TC}LL + {32 * s}LL + lane, rc{s} = row{s} < {N}LL ? row{s} : {N - 1}LL;",
                 f"        const long long o{s} = rc{s} / {inner}LL, j{s} = rc{s} % {inner}LL;",
                 f"        float acc{s} = {INIT[red.op]};" + (f" long long ai{s} = 0;" if arg else "")]
        em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", prefix=f"a{s}_")
        v = em.value(red.args[0], f"i{s}")
        if arg:
            step = arg_step(better, v, f"acc{s}", f"ai{s}")
            fold = (f"{{ const float ov = sacc[(w * {TC} + {s}) * 32 + lane]; const long long oi = sidx[(w * {TC} + {s}) * 32 + lane];"
                    f" if {arg_takes(better, 'ov', 'oi', f'acc{s}', f'ai{s}')} {{ acc{s} = ov; ai{s} = oi; }} }}")
        else:
            step = f"acc{s} = {combine(red.op, f'acc{s}', v)};"
            fold = f"acc{s} = {combine(red.op, f'acc{s}', f'sacc[(w * {TC} + {s}) * 32 + lane]')};"
        if Y > 1:  # every warp's partials in shared memory; warp 0 folds them in warp order
            merge += [f"        sacc[(wy * {TC} + {s}) * 32 + lane] = acc{s};" + (f" sidx[(wy * {TC} + {s}) * 32 + lane] = ai{s};" if arg else ""),
                      f"        if (wy == 0) for (int w = 1; w < {Y}; ++w) {fold}"]
        loop += [f"            {{ const long long i{s} = ((o{s} * {R}LL + r) * {inner}LL + j{s});", em.take("              "),
                 f"              {step} }}"]
        if arg and out is red:
            pre, val = "", f"ai{s}"
        else:
            post = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])", lambda n, s=s: f"acc{s}" if n is red else None, prefix=f"o{s}_")
            val = f"from_f<{CTYPE[out.dtype]}>({post.value(out, f'row{s}')})"
            pre = post.take("            ")
        store += [f"        if (row{s} < {N}LL{' && wy == 0' if Y > 1 else ''}) {{", pre, f"            out[row{s}] = {val};", "        }"]
    nw = -(-N // (32 * TC))
    rloop = f"for (long long r = wy; r < {R}LL; r += {Y})" if Y > 1 else f"for (long long r = 0; r < {R}LL; ++r)"
    if Y == 1:
        body = "\n".join(head + ["        #pragma unroll 4", f"        {rloop} {{"] + loop + ["        }"] + store)
        return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_rows({args}) {{
    const long long lane = threadIdx.x & 31;
    for (long long wg = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; wg < {nw}LL;
         wg += ((long long)gridDim.x * blockDim.x) >> 5) {{
{body}
    }}
}}
"""
    body = "\n".join(head + ["        #pragma unroll 4", f"        {rloop} {{"] + loop
                     + ["        }", "        __syncthreads();  // sacc free (the last group's merge done)"]
                     + merge[0::2] + ["        __syncthreads();"] + merge[1::2] + store)
    idx = f"    __shared__ long long sidx[{Y * TC * 32}];\n" if arg else ""
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_rows({args}) {{
    __shared__ float sacc[{Y * TC * 32}];
{idx}    const long long lane = threadIdx.x & 31, wy = threadIdx.x >> 5;
    for (long long wg = blockIdx.x; wg < {nw}LL; wg += gridDim.x) {{  // a block a group of {32 * TC} columns
{body}
    }}
}}
"""


def grid(p, k, sms: int, max_threads_per_sm: int) -> int:
    """A warp (split: a block) per TC x 32 outputs, as many blocks as fit at once times the waves."""
    need = max(1, -(-(p.outer * p.inner) // (32 * TC * (1 if k.split else k.block // 32))))
    return int(min(need, sms * max(1, max_threads_per_sm // k.block) * k.waves))
