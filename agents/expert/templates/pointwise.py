"""A fused pointwise chain: one pass over the output, grid-stride, `items` elements per thread
per iteration, optional 16-byte vector loads/stores for the tensors that match the output."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import OpGraph


@dataclass
class PointwiseKnobs:
    block: int = 256
    items: int = 1  # elements (or vectors) per thread per loop iteration
    vec: int = 1  # 1, or elements per 16-byte vector
    waves: int = 4  # grid = min(needed, SMs * waves * blocks per SM); 0: the whole grid, no grid-stride loop


def vec_width(dtype: str) -> int:
    return 16 // {"float32": 4, "bfloat16": 2, "float16": 2}.get(dtype, 4)


def vector_reads(make_emitter, value, tensors, vt: str, at: str, only: set | None = None) -> tuple[str, str, str]:
    """A vector loop's body for `value` at flat index `i` (`e` along the vector): (the loads, before the
    element loop, of each tensor read at `i` itself (and named in `only`, where given) as one `vt` vector
    `L_<name>` at vector index `at`; the element's statements; its value). Any other read (an index map, a
    broadcast) stays per element. `make_emitter(load)` builds the Emitter."""
    read = set()

    def load(t, idx):
        if idx == "i" and (only is None or t.name in only):
            read.add(t.name)
            return f"to_f(reinterpret_cast<const {CTYPE[t.dtype]}*>(&L_{t.name})[e])"
        return f"to_f({t.name}[{idx}])"
    em = make_emitter(load)
    val = em.value(value, "i")
    body = em.take("            ")
    loads = "\n".join(f"        {vt} L_{t.name} = reinterpret_cast<const {vt}*>({t.name})[{at}];" for t in tensors if t.name in read)
    return loads, body, val


def leaves(g: OpGraph):
    return [n for n in g.inputs + g.params]


def render(g: OpGraph, k: PointwiseKnobs) -> str:
    out = g.output
    n = math.prod(out.shape)
    tensors = leaves(g)
    params = ", ".join([f"{CTYPE[out.dtype]}* __restrict__ out"] +
                       [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors])
    if k.vec > 1:
        full = [t for t in tensors if tuple(t.shape) == tuple(out.shape) and t.dtype == out.dtype]
        V = k.vec
        vt = "float4" if out.dtype == "float32" else "uint4"
        ot = CTYPE[out.dtype]
        # vector body: a full-shape tensor read at the output's own index comes in once per vector; one read
        # through an index map (roll, transpose, select of a same-shape tensor) or broadcast is read per element
        loads, vbody, val = vector_reads(Emitter, out, tensors, vt, "vi", {t.name for t in full})
        em2 = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])")
        sval = em2.value(out, "i")
        sbody = em2.take("        ")
        body = f"""
    const long long nvec = {n // V}LL;
    for (long long base = (long long)blockIdx.x * blockDim.x * {k.items} + threadIdx.x; base < nvec;
         base += (long long)gridDim.x * blockDim.x * {k.items}) {{
#pragma unroll
      for (int it = 0; it < {k.items}; ++it) {{
        long long vi = base + (long long)it * blockDim.x;
        if (vi >= nvec) break;
{loads}
        {vt} R;
#pragma unroll
        for (int e = 0; e < {V}; ++e) {{
            long long i = vi * {V} + e;
{vbody}
            reinterpret_cast<{ot}*>(&R)[e] = from_f<{ot}>({val});
        }}
        reinterpret_cast<{vt}*>(out)[vi] = R;
      }}
    }}
    for (long long i = {n // V * V}LL + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < {n}LL;
         i += (long long)gridDim.x * blockDim.x) {{
{sbody}
        out[i] = from_f<{ot}>({sval});
    }}"""
    else:
        em = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])")
        val = em.value(out, "i")
        sbody = em.take("            ")
        body = f"""
    for (long long base = (long long)blockIdx.x * blockDim.x * {k.items} + threadIdx.x; base < {n}LL;
         base += (long long)gridDim.x * blockDim.x * {k.items}) {{
#pragma unroll
        for (int it = 0; it < {k.items}; ++it) {{
            long long i = base + (long long)it * blockDim.x;
            if (i >= {n}LL) break;
{sbody}
            out[i] = from_f<{CTYPE[out.dtype]}>({val});
        }}
    }}"""
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_pointwise({params}) {{{body}
}}
"""


def grid(g: OpGraph, k: PointwiseKnobs, sms: int, max_threads_per_sm: int) -> int:
    n = math.prod(g.output.shape)
    per_block = k.block * k.items * k.vec
    need = max(1, -(-n // per_block))
    if not k.waves:  # every thread its own items: the most loads in flight, no loop overhead
        return int(need)
    cap = sms * max(1, max_threads_per_sm // k.block) * k.waves
    return int(min(need, cap))
