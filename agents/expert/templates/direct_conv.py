"""Direct convolution for narrow groups (depthwise: a few output channels a group), where an
implicit GEMM's tensor-core tile would be mostly empty: a thread per output element sums its
group's channels over the kernel window (neighbouring threads share most of their inputs, so the
loads hit L1/L2), adds the bias and applies the fused pointwise chain before its one store."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter, per_output_grid, per_output_head
from agents.expert.opgraph import OpGraph, Unsupported
from agents.expert.templates.conv import ConvPlan, kernel_args


@dataclass
class DirectKnobs:
    block: int = 256
    waves: int = 8  # grid = min(needed, SMs x blocks per SM x waves); 0: a thread per output, no loop


def render(g: OpGraph, p: ConvPlan, k: DirectKnobs) -> str:
    if p.transposed:
        raise Unsupported("a narrow-group transposed convolution")
    out = g.output
    args = kernel_args(g, p)
    bias = p.bias
    post = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])",
                   lambda n: ("c_val" if n is p.conv else None), prefix="e")
    v_out = post.value(out, "o_lin")
    osp, isp, ksp = math.prod(p.out_sp), math.prod(p.in_sp), math.prod(p.ker)
    n_out = p.N * p.OC * osp
    ind = "        "
    lines = ["        long long c_r = o_lin;"]
    for d in reversed(range(p.nd)):
        lines.append(f"{ind}const long long o{d} = c_r % {p.out_sp[d]}LL; c_r /= {p.out_sp[d]}LL;")
    lines += [f"{ind}const long long oc = c_r % {p.OC}LL, img = c_r / {p.OC}LL, grp = oc / {p.OCg}LL;",
              f"{ind}float c_acc = 0.0f;",
              f"{ind}for (int ic = 0; ic < {p.Cg}; ++ic) {{",
              f"{ind}    const float* xb = X + ((img * {p.C}LL + grp * {p.Cg}LL + ic) * {isp}LL);",
              f"{ind}    const float* wb = W + ((oc * {p.Cg}LL + ic) * {ksp}LL);"]
    loops, closes, lin, klin = [], [], "0LL", "0"
    for d in range(p.nd):
        pre = ind + "    " * (d + 1)
        loops.append(f"{pre}for (int k{d} = 0; k{d} < {p.ker[d]}; ++k{d}) {{\n"
                     f"{pre}    const long long i{d} = o{d} * {p.stride[d]}LL - {p.pad[d]}LL + (long long)k{d} * {p.dil[d]}LL;\n"
                     f"{pre}    if (i{d} < 0 || i{d} >= {p.in_sp[d]}LL) continue;")
        closes.append(f"{pre}}}")
        lin = f"({lin} * {p.in_sp[d]}LL + i{d})"
        klin = f"({klin} * {p.ker[d]} + k{d})"
    inner = ind + "    " * (p.nd + 1) + f"c_acc = fmaf(xb[{lin}], wb[{klin}], c_acc);"
    fin = f"const float c_val = c_acc{f' + to_f({bias.name}[oc])' if bias is not None else ''};"
    body = "\n".join(lines + loops + [inner] + closes[::-1] + [f"{ind}}}", f"{ind}{fin}", post.take(ind),
                                                                  f"{ind}out[o_lin] = from_f<{CTYPE[out.dtype]}>({v_out});"])
    head = per_output_head(n_out, k.waves)
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_dconv({args}) {{
{head}
{body}
    }}
}}
"""


def grid(p: ConvPlan, k: DirectKnobs, sms: int, max_threads_per_sm: int) -> int:
    return per_output_grid(p.N * p.OC * math.prod(p.out_sp), k.block, k.waves, sms, max_threads_per_sm)
