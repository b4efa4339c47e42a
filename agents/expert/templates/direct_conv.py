"""Direct convolution, exact fp32 on the CUDA cores, for the shapes where an implicit GEMM's
tensor-core tile would be mostly empty.

- Narrow groups (depthwise: a few output channels a group, `ocb` 1): a thread per output element
  sums its group's channels over the kernel window (neighbouring threads share most of their
  inputs, so the loads hit L1/L2).
- Few input channels (a first layer: 3 channels, K = 81 for a 3x3x3 kernel; `ocb` > 1): a thread per
  output pixel and block of `ocb` output channels, the weights staged once a block into shared
  memory transposed (a tap's `ocb` weights side by side, read 16 bytes at a time, the same address
  across the warp), so each input value loaded feeds `ocb` FMAs.

Both add the bias and apply the fused pointwise chain before each output's one store."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter, per_output_grid, per_output_head
from agents.expert.opgraph import OpGraph, Unsupported
from agents.expert.templates.conv import ConvPlan, channels_last_store, kernel_args
from agents.expert.templates.gemm_tf32 import TF32_PRELUDE


@dataclass
class DirectKnobs:
    block: int = 256
    waves: int = 8  # grid = min(needed, SMs x blocks per SM x waves); 0: a thread per output, no loop
    ocb: int = 1  # output channels a thread (> 1: weights staged in shared memory); divides a group's channels
    cl_out: str = ""  # ocb > 1: the output stored channels last ("raw", or "tf32": rounded) as the next conv's staged
    # input (a program's hand-off: a thread's ocb channels of a pixel are one run of the row)


SMEM_FLOATS = 12 * 1024  # the staged weight under the 48 KiB of static shared memory


def channel_blocks(p: ConvPlan) -> list[int]:
    """The `ocb` a channel-blocked direct conv may take: divisors of a group's output channels up to
    12 (ptxas keeps such a kernel at 64 registers: 12 fit in 45, 16 spill 20 bytes, 24 spill 124),
    widest first, multiples of four (16-byte weight reads) before the rest; none where the weight does
    not fit in shared memory or the conv is transposed."""
    if p.transposed or p.OC * p.K > SMEM_FLOATS:
        return []
    ds = [d for d in range(12, 1, -1) if p.OCg % d == 0]
    return [d for d in ds if d % 4 == 0] + [d for d in ds if d % 4]


def suits(p: ConvPlan) -> bool:
    """Few input channels and output channels a group: a GEMM whose K is a few k-steps and whose N
    fills at most half a 128-wide tile, where tensor cores have little to do per staged tile."""
    return bool(channel_blocks(p)) and p.K <= 256 and p.OCg <= 64


def render(g: OpGraph, p: ConvPlan, k: DirectKnobs) -> str:
    if p.transposed:
        raise Unsupported("a narrow-group transposed convolution")
    if k.ocb > 1:
        return _render_blocked(g, p, k)
    if k.cl_out:
        raise Unsupported("a channels-last hand-off from the direct conv of one output channel a thread")
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
    lines += _window(p, ind, "c_acc = fmaf(xb[LIN], wb[KLIN], c_acc);")
    fin = f"const float c_val = c_acc{f' + to_f({bias.name}[oc])' if bias is not None else ''};"
    body = "\n".join(lines + [f"{ind}}}", f"{ind}{fin}", post.take(ind),
                                f"{ind}out[o_lin] = from_f<{CTYPE[out.dtype]}>({v_out});"])
    head = per_output_head(n_out, k.waves)
    return f"""{PRELUDE}
extern "C" __global__ void __launch_bounds__({k.block}) egg_dconv({args}) {{
{head}
{body}
    }}
}}
"""


def _window(p: ConvPlan, ind: str, inner: str) -> list[str]:
    """The loops over the kernel window around `inner`, which reads the input at `xb[lin]` and the
    tap's weights at `klin`; taps outside the input (padding) skipped."""
    loops, closes, lin, klin = [], [], "0LL", "0"
    for d in range(p.nd):
        pre = ind + "    " * (d + 1)
        loops.append(f"{pre}for (int k{d} = 0; k{d} < {p.ker[d]}; ++k{d}) {{\n"
                     f"{pre}    const long long i{d} = o{d} * {p.stride[d]}LL - {p.pad[d]}LL + (long long)k{d} * {p.dil[d]}LL;\n"
                     f"{pre}    if (i{d} < 0 || i{d} >= {p.in_sp[d]}LL) continue;")
        closes.append(f"{pre}}}")
        lin = f"({lin} * {p.in_sp[d]}LL + i{d})"
        klin = f"({klin} * {p.ker[d]} + k{d})"
    body = ind + "    " * (p.nd + 1)
    return loops + [body + line for line in inner.replace("KLIN", klin).replace("LIN", lin).split("\n")] + closes[::-1]


def _render_blocked(g: OpGraph, p: ConvPlan, k: DirectKnobs) -> str:
    B = k.ocb
    if p.OCg % B or p.transposed or p.OC * p.K > SMEM_FLOATS:
        raise Unsupported(f"{B} output channels a thread for {p.OCg} a group, a {p.OC} x {p.K} weight")
    out = g.output
    bias = p.bias
    post = Emitter(lambda t, idx: f"to_f({t.name}[{idx}])",
                   lambda n: ("c_val" if n is p.conv else None), prefix="e")
    v_out = post.value(out, "o_lin")
    osp, isp, ksp = math.prod(p.out_sp), math.prod(p.in_sp), math.prod(p.ker)
    n_thr = p.N * (p.OC // B) * osp
    ind = "        "
    wide = B % 4 == 0  # the tap's weights as float4: OC and the block's first channel are multiples of four
    fma = ("const float4* wr = reinterpret_cast<const float4*>(sW + (ic * %dLL + KLIN) * %d + oc0);\n"
           "#pragma unroll\n"
           "for (int j = 0; j < %d; ++j) {\n"
           "    const float4 w4 = wr[j];\n"
           "    acc[4 * j] = fmaf(xv, w4.x, acc[4 * j]); acc[4 * j + 1] = fmaf(xv, w4.y, acc[4 * j + 1]);\n"
           "    acc[4 * j + 2] = fmaf(xv, w4.z, acc[4 * j + 2]); acc[4 * j + 3] = fmaf(xv, w4.w, acc[4 * j + 3]);\n"
           "}" % (ksp, p.OC, B // 4)) if wide else (
           "const float* wr = sW + (ic * %dLL + KLIN) * %d + oc0;\n"
           "#pragma unroll\n"
           "for (int j = 0; j < %d; ++j) acc[j] = fmaf(xv, wr[j], acc[j]);" % (ksp, p.OC, B))
    lines = ["        long long c_r = o_t;", f"{ind}const long long s_p = c_r % {osp}LL; c_r /= {osp}LL;",
             f"{ind}long long s_r = s_p;"]
    for d in reversed(range(p.nd)):
        lines.append(f"{ind}const long long o{d} = s_r % {p.out_sp[d]}LL; s_r /= {p.out_sp[d]}LL;")
    lines += [f"{ind}const int oc0 = (int)(c_r % {p.OC // B}LL) * {B};",
              f"{ind}const long long img = c_r / {p.OC // B}LL, grp = oc0 / {p.OCg};",
              f"{ind}float acc[{B}];",
              "#pragma unroll",
              f"{ind}for (int j = 0; j < {B}; ++j) acc[j] = 0.0f;",
              f"{ind}for (int ic = 0; ic < {p.Cg}; ++ic) {{",
              f"{ind}    const float* xb = X + ((img * {p.C}LL + grp * {p.Cg}LL + ic) * {isp}LL);"]
    lines += _window(p, ind, "const float xv = xb[LIN];\n" + fma)
    if k.cl_out:  # (image, pixel, channel): the thread's channels one run of 4 B bytes
        store = channels_last_store(g, p, k.cl_out, v_out, ind + "    ")
    else:
        store = f"{ind}    out[o_lin] = from_f<{CTYPE[out.dtype]}>({v_out});"
    lines += [f"{ind}}}"] + ([f"{ind}const long long cl_pix = img * {osp}LL + s_p;"] if k.cl_out else []) + [
              "#pragma unroll", f"{ind}for (int j = 0; j < {B}; ++j) {{",
              f"{ind}    const long long oc = oc0 + j, o_lin = (img * {p.OC}LL + oc) * {osp}LL + s_p;",
              f"{ind}    const float c_val = acc[j]{f' + to_f({bias.name}[oc])' if bias is not None else ''};",
              post.take(ind + "    "), store, f"{ind}}}"]
    loop = per_output_head(n_thr, k.waves, "o_t")
    return f"""{PRELUDE}{TF32_PRELUDE if k.cl_out == "tf32" else ""}
extern "C" __global__ void __launch_bounds__({k.block}) egg_dconv({kernel_args(g, p)}) {{
    // the weight, transposed: a tap's {p.OC} output channels side by side
    __shared__ __align__(16) float sW[{p.OC * p.K}];
    for (int t = threadIdx.x; t < {p.OC * p.K}; t += blockDim.x)
        sW[(t % {p.K}) * {p.OC} + t / {p.K}] = W[t];
    __syncthreads();
{loop}
{chr(10).join(lines)}
    }}
}}
"""


def grid(p: ConvPlan, k: DirectKnobs, sms: int, max_threads_per_sm: int) -> int:
    return per_output_grid(p.N * p.OC // max(1, k.ocb) * math.prod(p.out_sp), k.block, k.waves, sms, max_threads_per_sm)
