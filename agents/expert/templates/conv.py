"""Forward convolution (1-, 2- or 3-d; stride, padding, dilation, groups, bias) as an implicit GEMM
on tensor cores, the pointwise chain after it fused into the store.

Per group (blockIdx.z): GEMM rows are output pixels m = (image, output position), columns the
group's output channels, K = (input channel, kernel offset). The weight (OC, C/groups, *kernel) is
that GEMM's B read in place (k-contiguous); A is gathered from the input on the fly (im2col never
exists): each thread owns one output pixel of the block's tile for every copy, decodes it once, and
fetches (channel, kernel offset) columns with 4-byte cp.async, zero-filled at the padding. The main
loop is gemm_tf32's; `split` 1 is plain TF32 (what eager's cuDNN runs by default, which the float64
rule then measures against), 3 is 3xTF32.

Layout "nhwc" (channels last, the default where a group's channels come in fours) stages the
input as (N, *spatial, C) and the weight as (groups, OC/groups, *kernel, C/groups) first, by two
small kernels; K then runs over (kernel offset, channel), so an A row's BK columns are contiguous
channels of one input pixel: 16-byte cp.async, one decode per k-tile and thread, and ldmatrix
fragments. Layout "nchw" gathers from the input in place with 4-byte copies (first layers with
3 channels, where staging buys nothing).

Transposed convolutions are the same GEMM read as a gather: output position o takes input
position i = (o + padding - k * dilation) / stride wherever that divides exactly and lies inside
the input; their weight (C, OC/groups, *kernel) is gathered too (k runs over (channel, offset))."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from agents.expert.codegen import CTYPE, Emitter
from agents.expert.opgraph import Node, OpGraph, Unsupported, check_elementwise_after
from agents.expert.templates.gemm import GemmKnobs
from agents.expert.templates.gemm_tf32 import BK, SWIZZLE_PAD, Operand, canonical_piece, kernel_source, kernel_source_wgmma

MIN_GROUP_CHANNELS = 8  # narrower groups (depthwise) waste the tensor-core tile: a direct path's job


@dataclass
class ConvPlan:
    conv: Node
    nd: int
    N: int
    C: int
    OC: int
    groups: int
    in_sp: tuple
    ker: tuple
    out_sp: tuple
    stride: tuple
    pad: tuple
    dil: tuple
    bias: Node | None
    transposed: bool = False
    cin: int = 0  # the task's input channels where the staged copies pad them (`padded`; C is then the padded count)

    @property
    def C_task(self) -> int:  # the input's channels as the task's tensors hold them
        return self.cin or self.C

    @property
    def Cg(self) -> int:
        return self.C // self.groups

    @property
    def OCg(self) -> int:
        return self.OC // self.groups

    @property
    def M(self) -> int:
        return self.N * math.prod(self.out_sp)

    @property
    def K(self) -> int:
        return self.Cg * math.prod(self.ker)

    # -- the channels-last GEMM: a strided transposed conv is split by output phase -------------
    @property
    def phased(self) -> bool:
        """A transposed conv with a stride: each output residue class (o mod stride per dim) is its
        own GEMM over only the taps that reach it (the rest would multiply zeros)."""
        return self.transposed and any(s > 1 for s in self.stride)

    @property
    def R(self) -> int:  # phases (residue classes)
        return math.prod(self.stride) if self.phased else 1

    @property
    def tap_step(self) -> tuple:  # taps of one phase are this far apart in the kernel
        return tuple(s // math.gcd(s, d) for s, d in zip(self.stride, self.dil)) if self.phased else (1,) * self.nd

    @property
    def taps(self) -> tuple:  # taps per dim of a phase, at most
        return tuple(-(-k // st) for k, st in zip(self.ker, self.tap_step))

    @property
    def Kg(self) -> int:  # the channels-last GEMM's K: (tap, channel)
        return self.Cg * math.prod(self.taps)

    @property
    def Mg(self) -> int:  # the channels-last GEMM's rows: the largest phase's pixels (phase 0's)
        if not self.phased:
            return self.M
        return self.N * math.prod(-(-o // s) for o, s in zip(self.out_sp, self.stride))


def plan_conv(g: OpGraph, narrow_ok: bool = False) -> ConvPlan:
    """The convolution's plan; `narrow_ok` admits depthwise/narrow groups (the direct template's)."""
    cs = [n for n in g.nodes if n.kind == "conv"]
    if len(cs) != 1:
        raise Unsupported(f"{len(cs)} convolutions in one task")
    cv = cs[0]
    if any(n.kind in ("reduce", "gemm", "pool", "scan") for n in g.nodes):
        raise Unsupported(f"a {next(n.kind for n in g.nodes if n.kind in ('reduce', 'gemm', 'pool', 'scan'))} "
                          "with a convolution (the conv template fuses pointwise ops only)")
    check_elementwise_after(g, [cv], "convolution")
    if tuple(g.output.shape) != tuple(cv.shape):
        raise Unsupported("a convolution followed by a shape change")
    p = plan_of(cv)
    if p.OCg < MIN_GROUP_CHANNELS and not narrow_ok:
        raise Unsupported(f"a depthwise or narrow-group convolution ({p.OCg} output channel(s) a group)")
    return p


def plan_of(cv: Node) -> ConvPlan:
    """A conv node's plan: its operands read as they are (an input, a weight and bias parameter), fp32."""
    x, w, b = cv.args
    if x.kind != "input" or w.kind != "param" or (b is not None and b.kind != "param"):
        raise Unsupported("a convolution whose operands are computed (a prologue)")
    if x.dtype != "float32" or w.dtype != "float32":
        raise Unsupported(f"a {x.dtype} convolution (the conv template is fp32)")
    nd = len(x.shape) - 2
    a = cv.attrs
    tr = bool(a.get("transposed"))
    p = ConvPlan(cv, nd, x.shape[0], x.shape[1], cv.shape[1], a["groups"], tuple(x.shape[2:]), tuple(w.shape[2:]),
                 tuple(cv.shape[2:]), tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"]), b, tr)
    if p.C % p.groups or p.OC % p.groups or tuple(w.shape[:2]) != ((p.C, p.OCg) if tr else (p.OC, p.Cg)):
        raise Unsupported("convolution groups that do not divide the channels")
    return p


LAYOUTS = ("nhwc", "nchw", "gemm")


def pointwise(p: ConvPlan) -> bool:
    """A 1x1 conv without stride or padding: per image and group a plain GEMM of the weight and the
    input as it lies (layout "gemm")."""
    return (not p.transposed and all(k == 1 for k in p.ker) and all(s == 1 for s in p.stride)
            and all(x == 0 for x in p.pad))


def padded(p: ConvPlan) -> ConvPlan | None:
    """`p` with its input channels padded to a multiple of 4 in the staged copies (zeros in the input's pad and
    the weight's): an image network's first conv (3 channels) then takes the staged channels-last kernels, a tap's
    channels one 16-byte copy, where the in-place gather reads 4 bytes a piece (SqueezeNet's 7x7 conv over 3
    channels: 5.2 ms, 22 TFLOP/s, on the H100). Its K grows by a third. None where it has no use: channels already
    in fours, groups, a transposed conv, a 1x1 conv read in place, or more than FEW_CHANNELS channels."""
    if p.cin or p.groups != 1 or p.C % 4 == 0 or p.transposed or pointwise(p) or p.C > FEW_CHANNELS:
        return None
    return replace(p, C=-(-p.C // 4) * 4, cin=p.C)


def default_layout(p: ConvPlan) -> str:
    """A pointwise conv reads its input in place as a GEMM operand (it is memory-bound: staging would
    add a pass over its largest tensor). Otherwise channels last where a group's channels come in
    fours (16-byte copies) or the conv is split by phase (a strided transposed one: the in-place
    gather would multiply mostly zeros); the in-place gather for the rest."""
    if pointwise(p):
        return "gemm"
    return "nhwc" if p.Cg % 4 == 0 or p.phased else "nchw"


def operands(p: ConvPlan, k: GemmKnobs, layout: str = "nchw") -> tuple[Operand, Operand]:
    if layout == "gemm":  # A: the image's pixels by channels, read as (K, M) in place; B: the weight (OCg, Cg)
        S = math.prod(p.in_sp)
        return (Operand("A", k.BM, S, p.Cg, False, 4 if S % 4 == 0 else 1),
                Operand("B", k.BN, p.OCg, p.Cg, True, 4 if p.Cg % 4 == 0 else 1))
    if layout == "nhwc":  # both k-contiguous: A rows are pixels' channel runs, B the staged weight
        sw = k.wgmma and k.swz  # wgmma's 128-byte swizzle (the K tile is 32: a tile row is 128 bytes)
        a = Operand("A", k.BM, p.Mg, p.Kg, True, 4 if p.Cg % 4 == 0 else 1, k.wgmma, BK, sw)
        return a, Operand("B", k.BN, p.OCg, p.Kg, True, 4 if p.Kg % 4 == 0 else 1, k.wgmma, BK, sw, tail=k.planes)
    a = Operand("A", k.BM, p.M, p.K, False, 1)  # gathered: k rows of BM pixels, pixels contiguous
    b = Operand("B", k.BN, p.OCg, p.K, True, 1 if p.transposed or p.K % 4 else 4)
    return a, b


def shared_bytes(p: ConvPlan, k: GemmKnobs, layout: str = "nchw") -> int:
    """Dynamic shared memory (the ring: a high and a low plane of each tile with k.planes); `static_bytes`
    is the rest."""
    a, b = operands(p, k, layout)
    pad = SWIZZLE_PAD if layout == "nhwc" and k.wgmma and k.swz else 0  # the ring aligns itself past the static rowinfo
    return k.stages * (a.elems + b.elems) * 4 * (2 if k.planes else 1) + pad


def static_bytes(p: ConvPlan, k: GemmKnobs, layout: str = "nchw") -> int:
    return k.BM * (p.nd + 2) * 4 if layout == "nhwc" else 0


def arg_order(g: OpGraph, p: ConvPlan, staged: bool = False, planes: bool = False) -> list[Node]:
    """The GEMM kernel's tensors after `out`: X, W (their staged copies for "nhwc"), then the rest."""
    x, w = p.conv.args[0], p.conv.args[1]
    rest = [t for t in g.inputs + g.params if t is not x and t is not w]
    return (list(staged_nodes(p, planes)) if staged else [x, w]) + rest


def kernel_args(g: OpGraph, p: ConvPlan) -> str:
    """The kernel's parameters: out, the input X, the weight W, then the other tensors by name."""
    return ", ".join([f"{CTYPE[g.output.dtype]}* __restrict__ out", "const float* __restrict__ X", "const float* __restrict__ W"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in arg_order(g, p)[2:]])


def _setup(p: ConvPlan, k: GemmKnobs, T: int) -> str:
    """Per thread, once: the output pixel it gathers for, decoded into its input window's origin."""
    lines = [f"    const int rr = tid % {k.BM};  // this thread's pixel in every A copy (T is a multiple of BM)",
             "    const long long mt = m0 + rr;", f"    const bool m_ok = mt < {p.M}LL;",
             "    long long rest = m_ok ? mt : 0;"]
    for d in reversed(range(p.nd)):
        lines.append(f"    const int o{d} = (int)(rest % {p.out_sp[d]}); rest /= {p.out_sp[d]};")
        lines.append(f"    const int i{d} = o{d} + {p.pad[d]};" if p.transposed else
                     f"    const int i{d} = o{d} * {p.stride[d]} - {p.pad[d]};")
    lines.append("    const int grp = bz;")
    lines.append(f"    const float* xb = X + (rest * {p.C}LL + (long long)bz * {p.Cg}) * {math.prod(p.in_sp)}LL;")
    lines.append(f"    const float* Bb = W + (long long)bz * {p.OCg * p.K}LL;  // the group's weights (both layouts)")
    return "\n".join(lines)


def _spatial_offset(p: ConvPlan, q) -> list[str]:
    """Terms of an input pixel's offset within its image, the input position per dim being `q(d)`."""
    terms, stride = [], 1
    for d in reversed(range(p.nd)):
        terms.append(f"(long long){q(d)} * {stride}LL" if stride != 1 else f"(long long){q(d)}")
        stride *= p.in_sp[d]
    return terms


def _gather(p: ConvPlan, k: GemmKnobs, T: int, A: Operand, smem: str) -> str:
    """One A tile: columns k0 .. k0 + BK of this thread's pixel, rows of BK / (T / BM) a thread."""
    ksp = math.prod(p.ker)
    dec = ["                    long long r = kk_ % " + f"{ksp};", f"                    const long long ic = kk_ / {ksp};"]
    conds = []
    for d in reversed(range(p.nd)):
        if p.transposed:  # the input position whose footprint covers this output, where the stride divides
            dec.append(f"                    const int t{d} = i{d} - (int)(r % {p.ker[d]}) * {p.dil[d]}; r /= {p.ker[d]};")
            dec.append(f"                    const int q{d} = t{d} / {p.stride[d]};")
            conds.append(f"t{d} >= 0 && t{d} % {p.stride[d]} == 0 && q{d} < {p.in_sp[d]}")
        else:
            dec.append(f"                    const int q{d} = i{d} + (int)(r % {p.ker[d]}) * {p.dil[d]}; r /= {p.ker[d]};")
            conds.append(f"q{d} >= 0 && q{d} < {p.in_sp[d]}")
    off = _spatial_offset(p, lambda d: f"q{d}")
    body = "\n".join(dec)
    return f"""            for (int kr = tid / {k.BM}; kr < {BK}; kr += {T // k.BM}) {{
                const long long kk_ = k0 + kr;
                bool ok = m_ok && kk_ < {p.K}LL;
                const float* src = X;
                if (ok) {{
{body}
                    ok = {' && '.join(conds)};
                    src = xb + ic * {math.prod(p.in_sp)}LL + {' + '.join(off)};
                }}
                cp_async<4>({smem} + kr * {A.ld} + rr, ok ? src : X, ok ? 4 : 0);
            }}"""


def _weight_gather(p: ConvPlan, k: GemmKnobs, T: int, B: Operand, smem: str) -> str:
    """A transposed convolution's B tile: element (oc, (ic, offset)) of a (C, OC/groups, *kernel) weight."""
    ksp = math.prod(p.ker)
    return f"""            for (int c = tid; c < {k.BN * BK}; c += {T}) {{
                const int r = c / {BK}, kc = c % {BK};
                const long long oc = n0 + r, kk_ = k0 + kc;
                const bool ok = oc < {p.OCg} && kk_ < {p.K}LL;
                const float* src = Bb + ((kk_ / {ksp}) * {p.OCg}LL + oc) * {ksp}LL + kk_ % {ksp};
                cp_async<4>({smem} + r * {B.ld} + kc, ok ? src : W, ok ? 4 : 0);
            }}"""


def channels_last_store(g: OpGraph, p: ConvPlan, cl: str, v: str, indent: str) -> str:
    """The hand-off's store of value `v` at pixel `cl_pix` (image * positions + position), channel `oc`: channels
    last, rounded to TF32 where `cl` is "tf32" (as the next conv's staging pass would round), for the conv's fp32
    output whole in its own shape."""
    if g.output.dtype != "float32" or tuple(g.output.shape) != (p.N, p.OC, *p.out_sp):
        raise Unsupported("a channels-last hand-off stores the conv's fp32 output, whole, in its own shape")
    return f"{indent}out[cl_pix * {p.OC}LL + oc] = {f'__uint_as_float(round_tf32({v}))' if cl == 'tf32' else v};"


def _store(g: OpGraph, p: ConvPlan, layout: str = "nchw", partial: int = 0, cl: str = "", cat: int = 0) -> str:
    """The epilogue at GEMM row m, column n: "nhwc" reads the row's image and output pixel from
    `rowinfo` (a phase's rows are not consecutive pixels), "nchw" divides m, "gemm" has the image
    on blockIdx.z and m the pixel. `partial` (split-K's ranges on z in blocks of that many): the raw
    sum of this block's K range into its range's slice of the partials (`out`), no bias or epilogue.
    `cl` ("raw" or "tf32"): the value stored channels last (rounded to TF32), as the next conv's staging pass
    would have written it; the epilogue still reads its other tensors at the NCHW index `oi`. `cat` (channels): the
    value stored at `cat_oo`, the same pixel and channel of a concatenation of that many channels whose slice `out`
    points at."""
    osp = math.prod(p.out_sp)
    if cl and partial:
        raise Unsupported("a channels-last hand-off from split-K's partials")
    if cat and (partial or cl):
        raise Unsupported("a store into a concatenation from split-K's partials or a channels-last hand-off")
    mt = "unsigned" if p.M < 2 ** 32 else "long long"
    bias = p.bias

    def special(n):
        if n is p.conv:
            return f"(acc[mi][ni][2 * h + e] + to_f({bias.name}[oc]))" if bias is not None else "acc[mi][ni][2 * h + e]"
        return None
    if partial:
        body = (f"                    out[(long long)(blockIdx.z / {partial}) * {p.N * p.OC * osp}LL + oi] = "
                "acc[mi][ni][2 * h + e];")
    else:
        em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", special, prefix="e")
        v = em.value(g.output, "oi")
        if cl:
            body = f"{em.take('                    ')}\n{channels_last_store(g, p, cl, v, '                    ')}"
        else:
            body = (f"{em.take('                    ')}\n                    out[{'cat_oo' if cat else 'oi'}] = "
                    f"from_f<{CTYPE[g.output.dtype]}>({v});")
    oc = f"                    const long long oc = (long long)grp * {p.OCg} + n;\n"

    def index(img: str, pixel: str) -> str:  # oi, and where a concatenation's slice takes it
        at = f"                    const long long oi = ((long long){img} * {p.OC}LL + oc) * {osp}LL + {pixel};\n"
        return at + (f"                    const long long cat_oo = ((long long){img} * {cat}LL + oc) * {osp}LL + {pixel};\n"
                     if cat else "")
    if layout == "gemm":
        pix = f"                    const long long cl_pix = (long long)img * {osp}LL + m;\n" if cl else ""
        return f"{oc}{index('img', 'm')}{pix}{body}"
    if layout == "nhwc":
        F = p.nd + 2
        pix = f"                    const long long cl_pix = (long long)oinfo[0] * {osp}LL + oinfo[{F - 1}];\n" if cl else ""
        return (f"                    const int* oinfo = rowinfo + (int)(m - m0) * {F};\n"
                f"                    if (oinfo[0] >= 0) {{\n{oc}{index('oinfo[0]', f'oinfo[{F - 1}]')}{pix}{body}\n                    }}")
    pix = "                    const long long cl_pix = (long long)mm_;\n" if cl else ""
    return (f"{oc}                    const {mt} mm_ = ({mt})m;  // 32-bit division where the pixels allow\n"
            f"{index(f'(mm_ / {osp})', f'mm_ % {osp}')}{pix}{body}")


def gemm_k(p: ConvPlan, layout: str) -> int:
    """The implicit GEMM's K (a group's): (channel, offset) in place, (tap, channel) channels last."""
    return {"nhwc": p.Kg, "gemm": p.Cg}.get(layout, p.K)


def splits(p: ConvPlan, k: GemmKnobs, layout: str) -> tuple[int, int]:
    """Split-K as run: (ranges, K a range, whole k-tiles); ranges that would be empty are dropped."""
    kt = -(-gemm_k(p, layout) // BK)
    per = -(-kt // max(1, min(k.splitk, kt)))
    return -(-kt // per), per * BK


def split_ok(p: ConvPlan, layout: str) -> bool:
    """Split-K takes a forward conv in place or channels last (a transposed conv's phases may leave
    outputs no block of a range writes; the 1x1 GEMM layout has its images on z)."""
    return not p.transposed and layout in ("nhwc", "nchw")


def partials_node(p: ConvPlan, k: GemmKnobs, layout: str) -> Node:
    """Split-K's workspace: each range's raw conv output (no bias), (ranges, N, OC, *out) flat."""
    return Node(f"{p.conv.name}_partials", "input", shape=(splits(p, k, layout)[0] * p.N * p.OC * math.prod(p.out_sp),),
                dtype="float32")


REDUCE_BLOCK = 256


def reduce_source(g: OpGraph, p: ConvPlan, k: GemmKnobs, layout: str) -> str:
    """`egg_conv_splitk(out, partials, <the conv's arguments>)`: a thread per output element sums the
    ranges' partials in range order (deterministic), adds the bias, applies the pointwise chain."""
    osp, total, ranges = math.prod(p.out_sp), p.N * p.OC * math.prod(p.out_sp), splits(p, k, layout)[0]

    def special(n):
        if n is p.conv:
            return f"(acc_v + to_f({p.bias.name}[oc]))" if p.bias is not None else "acc_v"
        return None
    em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", special, prefix="e")
    v = em.value(g.output, "i")
    args = kernel_args(g, p).split(", ", 1)
    return f"""
extern "C" __global__ void __launch_bounds__({REDUCE_BLOCK}) egg_conv_splitk({args[0]}, const float* __restrict__ P, {args[1]}) {{
    for (long long i = (long long)blockIdx.x * {REDUCE_BLOCK} + threadIdx.x; i < {total}LL; i += (long long)gridDim.x * {REDUCE_BLOCK}) {{
        const long long oc = (i / {osp}LL) % {p.OC}LL;
        float acc_v = 0.0f;
        for (int s = 0; s < {ranges}; ++s) acc_v += P[s * {total}LL + i];
{em.take("        ")}
        out[i] = from_f<{CTYPE[g.output.dtype]}>({v});
        (void)oc;
    }}
}}
"""


def reduce_grid(p: ConvPlan, sms: int) -> tuple[int]:
    return (max(1, min(-(-p.N * p.OC * math.prod(p.out_sp) // REDUCE_BLOCK), 16 * sms)),)


def render(g: OpGraph, p: ConvPlan, k: GemmKnobs, split: int, layout: str = "nchw") -> str:
    """The GEMM kernel `egg_conv`; with layout "nhwc" it reads the staged tensors (`staging_source`).
    With split-K (k.splitk > 1), `egg_conv` writes each K range's raw sums to the partials (its first
    argument) and `egg_conv_splitk` after it sums them with the bias and the epilogue."""
    ranges, kc = splits(p, k, layout)
    if ranges > 1:
        if not split_ok(p, layout) or k.wgmma:
            raise Unsupported("split-K takes a forward conv on mma.sync, in place or channels last")
        nb = grid(p, GemmKnobs(BM=k.BM, BN=k.BN), layout)[2]  # z blocks a range: groups (and phases)
        args = "float* __restrict__ out, " + kernel_args(g, p).split(", ", 1)[1]
        return _render(g, p, k, split, layout, (kc, nb), args) + reduce_source(g, p, k, layout)
    return _render(g, p, k, split, layout)


def render_fitting(g: OpGraph, p: ConvPlan, k: GemmKnobs, split: int, layout: str, smem_limit: int) -> tuple[str, int]:
    """`render`, and the dynamic shared memory its launch asks; Unsupported where that and the static
    part pass what a block may have."""
    src, smem = render(g, p, k, split, layout), shared_bytes(p, k, layout)
    if smem + static_bytes(p, k, layout) > smem_limit:
        raise Unsupported("tile does not fit in shared memory")
    return src, smem


def _render(g: OpGraph, p: ConvPlan, k: GemmKnobs, split: int, layout: str, ksplit: tuple[int, int] = (0, 1),
            args: str | None = None, epilogue: str | None = None) -> str:
    T = k.threads(True)
    A, B = operands(p, k, layout)
    args = args or kernel_args(g, p)
    partial = ksplit[1] if ksplit[0] else 0
    if k.cl_out and epilogue:
        raise Unsupported("a channels-last hand-off from a conv with its own epilogue")
    if k.wgmma and layout != "nhwc":
        raise Unsupported("wgmma reads the channels-last layout's staged tiles")
    if layout == "gemm":
        if not pointwise(p):
            raise Unsupported("layout gemm is for 1x1 convolutions without stride or padding")
        S = math.prod(p.in_sp)
        setup = (f"    const int img = bz / {p.groups}, grp = bz % {p.groups};\n"
                 f"    const float* Ab = X + ((long long)img * {p.C} + (long long)grp * {p.Cg}) * {S}LL;\n"
                 f"    const float* Bb = W + (long long)grp * {p.OCg * p.Cg}LL;")
        return kernel_source("egg_conv", args, k, A, B, S, p.OCg, p.Cg, setup, _store(g, p, "gemm", cl=k.cl_out, cat=k.cat_out),
                             split=split)
    if layout == "nhwc":
        # a phase's k-tiles: its real taps come first in K (_tap_decode), the rest would multiply zeros
        kt = f"({phase_taps(p)} * {p.Cg} + {BK - 1}) / {BK}" if p.phased else None
        per = BK // A.vec
        if T % per or k.BM % (T // per) or T < k.BM:
            raise Unsupported("the channels-last gather needs BM rows in whole passes of the block")
        if k.wgmma:
            if split != (3 if k.planes else 1):
                raise Unsupported("wgmma runs plain TF32, or 3xTF32 on the staged planes (split 3 with planes)")
            setup = _setup_nhwc(p, k) + (_gather_fast_setup(p, k, T, A) if _gather_fast(p, T, A) else "")
            xl, wl = (plane_sizes(p) if k.planes else (0, 0))
            return kernel_source_wgmma("egg_conv", args, k, A, B, p.Mg, p.OCg, p.Kg, setup,
                                       "" if epilogue else _store(g, p, "nhwc", cl=k.cl_out, cat=k.cat_out),
                                       a_loader=lambda smem: _gather_nhwc(p, k, T, A, smem, xl),
                                       tiles=phases_first(p, k), b_lo=wl, epilogue=epilogue, kt=kt)
        if epilogue:
            raise Unsupported("an epilogue over the tile's columns runs on the warpgroup MMA")
        if k.planes:
            raise Unsupported("the staged planes are read by the warpgroup MMA")
        return kernel_source("egg_conv", args, k, A, B, p.Mg, p.OCg, p.Kg, _setup_nhwc(p, k),
                             _store(g, p, "nhwc", partial, k.cl_out, k.cat_out), a_loader=lambda smem: _gather_nhwc(p, k, T, A, smem), split=split,
                             rounded=True, ksplit=ksplit, tiles=None if ksplit[0] else phases_first(p, k), kt=kt)
    if T % k.BM or BK % (T // k.BM):
        raise Unsupported("the gather needs threads a multiple of BM")
    return kernel_source("egg_conv", args, k, A, B, p.M, p.OCg, p.K, _setup(p, k, T), _store(g, p, partial=partial, cl=k.cl_out, cat=k.cat_out),
                         a_loader=lambda smem: _gather(p, k, T, A, smem), split=split,
                         b_loader=(lambda smem: _weight_gather(p, k, T, B, smem)) if p.transposed else None, ksplit=ksplit)


def _phase_decode(p: ConvPlan, res: str, ind: str) -> list[str]:
    """Statements giving, per dim d, the phase's residue r{d}, its first tap k0_{d} (-1: none) and its taps pn{d}
    (at least 1: a phase with none has k0 -1, which makes every tap invalid)."""
    lines = [f"{ind}int rr_ = {res};"]
    for d in reversed(range(p.nd)):
        lines.append(f"{ind}const int r{d} = rr_ % {p.stride[d]}; rr_ /= {p.stride[d]};")
    for d in range(p.nd):
        s_, ts = p.stride[d], p.tap_step[d]
        lines.append(f"{ind}int k0_{d} = -1;  // the first tap whose input position divides exactly")
        lines.append(f"{ind}for (int c = 0; c < {s_}; ++c)")
        lines.append(f"{ind}    if (((r{d} + {p.pad[d]} - c * {p.dil[d]}) % {s_} + {s_}) % {s_} == 0) {{ k0_{d} = c; break; }}")
        lines.append(f"{ind}const int pn{d} = k0_{d} >= 0 ? ({p.ker[d]} - k0_{d} + {ts - 1}) / {ts} : 1;  // this phase's taps")
    return lines


def phase_taps(p: ConvPlan) -> str:
    """The expression of this phase's taps (after _phase_decode): its real (tap, channel) columns are the first
    phase_taps * Cg of the GEMM's K (a phase of level 2 task 100's k3 s2 conv has 1 to 8 of the 8 a phase may)."""
    return " * ".join(f"pn{d}" for d in range(p.nd))


def _tap_decode(p: ConvPlan, ind: str, ok: str, between: list[str] | None = None) -> list[str]:
    """Statements: the tap index in `r_` -> kernel offsets k{d} per dim. A phase's taps are tap_step apart from
    its first, k0_{d}, and are split by its own counts pn{d}, so its real taps come first in K (`ok` turns false
    past them, or where the phase has none); `between` (the phase's decode, where it is not in scope) goes first."""
    lines = list(between or [])
    if not p.phased:
        return lines + [f"{ind}const int a{d} = r_ % {p.taps[d]}; r_ /= {p.taps[d]};" for d in reversed(range(p.nd))] + \
            [f"{ind}const int k{d} = a{d};" for d in range(p.nd)]
    lines += [f"{ind}const int a{d} = r_ % pn{d}; r_ /= pn{d};" for d in reversed(range(p.nd))]
    lines.append(f"{ind}{ok} = {ok} && r_ == 0;")  # past the phase's taps (no comment: conv_tma joins these lines)
    for d in range(p.nd):
        lines.append(f"{ind}const int k{d} = k0_{d} + a{d} * {p.tap_step[d]};")
        lines.append(f"{ind}{ok} = {ok} && k0_{d} >= 0 && k{d} < {p.ker[d]};")
    return lines


def _setup_nhwc(p: ConvPlan, k: GemmKnobs) -> str:
    """Once per block: the group and phase (blockIdx.z), and each tile row's image (-1: no pixel),
    input window origin per dim and output pixel offset, in shared memory."""
    F = p.nd + 2
    lines = [f"    const int grp = bz / {p.R}, res = bz % {p.R};"]
    if p.phased:
        lines += _phase_decode(p, "res", "    ")
        for d in range(p.nd):
            lines.append(f"    const int J{d} = ({p.out_sp[d]} - r{d} + {p.stride[d] - 1}) / {p.stride[d]};  // this phase's extent")
        lines.append(f"    const long long Mr = {p.N}LL * " + " * ".join(f"J{d}" for d in range(p.nd)) + ";")
    else:
        lines.append(f"    const long long Mr = {p.M}LL;")
    lines += [f"    __shared__ int rowinfo[{k.BM * F}];  // per tile row: image, window origin per dim, output pixel",
              f"    if (tid < {k.BM}) {{",
              "        const long long mt = m0 + tid;",
              "        int img = -1, opix = 0;",
              "        int org[" + str(p.nd) + "] = {0};",
              "        if (mt < Mr) {",
              "            long long rest = mt;"]
    ostride = 1
    for d in reversed(range(p.nd)):
        if p.phased:
            lines.append(f"            const int o{d} = (int)(rest % J{d}) * {p.stride[d]} + r{d}; rest /= J{d};")
        else:
            lines.append(f"            const int o{d} = (int)(rest % {p.out_sp[d]}); rest /= {p.out_sp[d]};")
        lines.append(f"            org[{d}] = " + (f"o{d} + {p.pad[d]};" if p.transposed else f"o{d} * {p.stride[d]} - {p.pad[d]};"))
        lines.append(f"            opix += o{d} * {ostride};")
        ostride *= p.out_sp[d]
    lines += ["            img = (int)rest;", "        }",
              f"        rowinfo[tid * {F}] = img;"]
    lines += [f"        rowinfo[tid * {F} + {1 + d}] = org[{d}];" for d in range(p.nd)]
    lines += [f"        rowinfo[tid * {F} + {F - 1}] = opix;", "    }", "    __syncthreads();",
              f"    const float* Bb = W + (long long)bz * {p.OCg * p.Kg}LL;  // the group's (and phase's) staged weights"]
    return "\n".join(lines)


def phases_first(p: ConvPlan, k: GemmKnobs) -> str | None:
    """A phase-split transposed conv's blocks in launch order with the phase fastest (the grid keeps its
    shape: pixel tiles on x, channel tiles on y, groups x phases on z): a phase writes one output word in
    `stride` along each dim, so phase after phase every output line was written back to DRAM part by part
    (level 1 task 81, stride 5: 4.8 ms for 0.8 GB against eager's 1.8 on the H100); side by side, a pixel
    tile's phases fill its lines in L2 before they leave it. None where the conv is not phased."""
    if not p.phased:
        return None
    mt, nt = -(-p.Mg // k.BM), -(-p.OCg // k.BN)
    return f"""    // the phases of a pixel tile side by side in launch order (phase fastest): their interleaved output lines fill in L2
    long long lin_ = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    const int res_ = (int)(lin_ % {p.R}); lin_ /= {p.R};
    const long long m0 = (lin_ % {mt}) * {k.BM}; lin_ /= {mt};
    const long long n0 = (lin_ % {nt}) * {k.BN};
    const int bz = (int)(lin_ / {nt}) * {p.R} + res_;"""


def _in_strides(p: ConvPlan) -> list[int]:
    """Pixels between neighbours along each input dim (row-major spatial dims)."""
    return [math.prod(p.in_sp[d + 1:]) for d in range(p.nd)]


def _gather_fast(p: ConvPlan, T: int, A: Operand) -> bool:
    """The wgmma gather's lean form: canonical 16-byte pieces, whole passes of the block apart (so a thread's
    rows and k piece are fixed), an image within 32-bit offsets; a forward conv, or a transposed one (its window
    runs backwards: _lean_taps)."""
    return A.fast(T) and math.prod(p.in_sp) * p.C < 2 ** 31


def _lean_taps(p: ConvPlan) -> tuple[list[str], list[int], str]:
    """The lean gather's input position of a row's tap per dim: its origin (from rowinfo's `info`) plus or
    minus (the sign) the tap's variable times a step. Forward: o * stride - pad + k * dil. Transposed: o + pad -
    k * dil, which for a phase (o = J * stride + r, its taps k = k0 + a * tap_step) is J + (r + pad - k0 * dil)
    / stride - a * (tap_step * dil / stride), both divisions exact (k0 is the phase's first tap that divides;
    tap_step * dil is a multiple of the stride): the origin shifted once a block, the tap index a's step."""
    if not p.transposed:
        return [f"info[{1 + d}]" for d in range(p.nd)], list(p.dil), "+"
    if not p.phased:
        return [f"info[{1 + d}]" for d in range(p.nd)], list(p.dil), "-"
    return ([f"(info[{1 + d}] - k0_{d} * {p.dil[d]}) / {p.stride[d]}" for d in range(p.nd)],
            [p.tap_step[d] * p.dil[d] // p.stride[d] for d in range(p.nd)], "-")


def _gather_fast_setup(p: ConvPlan, k: GemmKnobs, T: int, A: Operand) -> str:
    """After rowinfo: this thread's rows (every T / per from gr_) as image base pointers and window
    origins in registers, read once (a row past the output: origin far outside, never copied), its k
    piece gk_ and that piece's shared offset gso_."""
    per, F = BK // 4, p.nd + 2
    sp = _in_strides(p)
    J = k.BM // (T // per)
    origin = _lean_taps(p)[0]
    org = " + ".join(f"(long long)({origin[d]}) * {sp[d]}" if p.phased else f"(long long){origin[d]} * {sp[d]}" for d in range(p.nd))
    row, piece = canonical_piece("tid", per)
    go = (" ".join(f"go_[j][{d}] = info[0] >= 0 ? {origin[d]} : -(1 << 28);" for d in range(p.nd)) if p.phased else
          f"""#pragma unroll
        for (int d = 0; d < {p.nd}; ++d) go_[j][d] = info[0] >= 0 ? info[1 + d] : -(1 << 28);""")
    return f"""
    const int gr_ = {row}, gk_ = {piece} * 4, gso_ = {A.at('gr_', 'gk_')};
    const float* gb_[{J}];
    int go_[{J}][{p.nd}];
    #pragma unroll
    for (int j = 0; j < {J}; ++j) {{
        const int* info = rowinfo + (gr_ + j * {T // per}) * {F};
        gb_[j] = X + (((long long)max(info[0], 0) * {math.prod(p.in_sp)} + {org}) * {p.C} + (long long)grp * {p.Cg});
        {go}
    }}"""


def _gather_nhwc(p: ConvPlan, k: GemmKnobs, T: int, A: Operand, smem: str, lo: int = 0) -> str:
    """One A tile from the channels-last input: this thread's column chunk is fixed, decoded once
    per tile into (tap, channel); its rows are every (T / chunks)-th of the tile. `lo`: the input is
    staged as TF32 planes, the low one `lo` floats after the high one; each piece of both is copied, the
    low plane's tile A.elems after the high one's."""
    v, per = A.vec, BK // A.vec
    S = math.prod(p.in_sp)
    dec, conds, qs = _tap_decode(p, "                ", "k_ok"), [], []
    for d in range(p.nd):
        if p.transposed:
            qs.append(f"                    const int t{d} = info[{1 + d}] - k{d} * {p.dil[d]};")
            conds.append(f"t{d} >= 0 && t{d} % {p.stride[d]} == 0 && t{d} / {p.stride[d]} < {p.in_sp[d]}")
        else:
            qs.append(f"                    const int q{d} = info[{1 + d}] + k{d} * {p.dil[d]};")
            conds.append(f"q{d} >= 0 && q{d} < {p.in_sp[d]}")
    off = _spatial_offset(p, lambda d: f"(t{d} / {p.stride[d]})" if p.transposed else f"q{d}")
    if _gather_fast(p, T, A):
        # the rows' image base and window origin from registers (_gather_fast_setup), the tap's offset once a
        # tile: a piece is an add, a compare a dim and its copy
        sp, (_, step, sg) = _in_strides(p), _lean_taps(p)
        tap = "a" if p.phased else "k"  # a phase's taps by their index in it
        toff = " + ".join(f"{tap}{d} * {step[d] * sp[d] * p.C}" for d in range(p.nd))
        toff = f"-({toff}) + ic" if p.transposed else f"{toff} + ic"
        rows = []
        for j in range(k.BM // (T // per)):
            inside = " && ".join(f"(unsigned)(go_[{j}][{d}] {sg} {tap}{d} * {step[d]}) < {p.in_sp[d]}u" for d in range(p.nd))
            dst = f"{smem} + gso_ + {j * (T // per) * BK}"
            two = (f"\n                  cp_async<16>({dst} + {A.elems}, ok ? gb_[{j}] + toff_ + {lo}LL : X, ok ? 16 : 0);"
                   if lo else "")
            rows.append(f"                {{ const bool ok = k_ok && {inside};\n"
                        f"                  cp_async<16>({dst}, ok ? gb_[{j}] + toff_ : X, ok ? 16 : 0);{two} }}")
        return f"""            {{
                const long long kk_ = k0 + gk_;
                bool k_ok = kk_ < {p.Kg}LL;
                const int off_ = k_ok ? (int)(kk_ / {p.Cg}) : 0, ic = k_ok ? (int)(kk_ % {p.Cg}) : 0;
                int r_ = off_;
{chr(10).join(dec)}
                const int toff_ = {toff};
{chr(10).join(rows)}
            }}"""
    two = (f"\n                    cp_async<{4 * v}>({smem} + {A.elems} + {A.at('r', 'kc')}, ok ? src + {lo}LL : X, ok ? {4 * v} : 0);"
           if lo else "")
    if A.canon and v == 4 and T % (8 * per) == 0:
        # a warp's 16-byte writes: 8 rows by 4 chunks, each 8 lanes on 8 rows (32 banks); 8 chunks of one row
        # would land on 4 banks in the canonical layout (8-way conflicts)
        row0, chunk = canonical_piece("tid", per)
    else:
        chunk, row0 = f"(tid % {per})", f"tid / {per}"
    return f"""            {{
                const int kc = {chunk} * {v};
                const long long kk_ = k0 + kc;
                bool k_ok = kk_ < {p.Kg}LL;
                const int off_ = k_ok ? (int)(kk_ / {p.Cg}) : 0, ic = k_ok ? (int)(kk_ % {p.Cg}) : 0;
                int r_ = off_;
{chr(10).join(dec)}
                for (int r = {row0}; r < {k.BM}; r += {T // per}) {{
                    const int* info = rowinfo + r * {p.nd + 2};
{chr(10).join(qs)}
                    const bool ok = k_ok && info[0] >= 0 && {' && '.join(conds)};
                    const float* src = X + (((long long)info[0] * {S}LL + {' + '.join(off)}) * {p.C}LL
                                            + (long long)grp * {p.Cg} + ic);
                    cp_async<{4 * v}>({smem} + {A.at('r', 'kc')}, ok ? src : X, ok ? {4 * v} : 0);{two}
                }}
            }}"""


STAGE_BLOCK = 256


def staging_source(p: ConvPlan, tf32: bool = False, planes: bool = False) -> str:
    """Two kernels for layout "nhwc": `egg_conv_xt` writes the input channels last (a 32x32 tile
    transpose through shared memory per (image, channel block, pixel block)); `egg_conv_wt` the
    weight as (groups, OC/groups, *kernel, C/groups). `tf32`: both written rounded to TF32 (plain TF32:
    the GEMM, wgmma's tensor cores too, then read them as they are). `planes`: both written as their TF32
    high part (rounded) and, `plane_sizes` floats after it, the low part (the rest, rounded) for 3xTF32 on
    the warpgroup MMA. After the GEMM's source (its prelude)."""
    S, ksp = math.prod(p.in_sp), math.prod(p.ker)
    xl, wl = plane_sizes(p)

    def val(x: str) -> str:
        return f"__uint_as_float(round_tf32({x}))" if tf32 else x

    def put(dst: str, i: str, x: str, lo: int, ok: str = "") -> str:
        if not planes:
            return f"{dst}[{i}] = {ok + ' ? ' if ok else ''}{val(x)}{' : 0.0f' if ok else ''};"
        x = f"({ok} ? {x} : 0.0f)" if ok else x
        return (f"{{ const float v_ = {x}, h_ = __uint_as_float(round_tf32(v_)); {dst}[{i}] = h_; "
                f"{dst}[{i} + {lo}LL] = __uint_as_float(round_tf32(v_ - h_)); }}")
    src_w = (f"((g * {p.Cg}LL + ic) * {p.OCg}LL + oc) * {ksp}LL + off" if p.transposed else
             f"((g * {p.OCg}LL + oc) * {p.C_task // p.groups}LL + ic) * {ksp}LL + off")
    pad = (f"\n        #pragma unroll\n        for (int c = {p.C_task}; c < {p.C}; ++c) tile[threadIdx.x * {p.C + 1} + c] = 0.0f;"
           f"  // the staged pad's channels" if p.cin else "")
    if p.cin and not few_channels(p):
        raise Unsupported("padded channels are staged a thread a pixel")
    if few_channels(p):  # a thread a pixel: its channels read across the warp's pixels, written through shared memory
        xt = f"""
extern "C" __global__ void __launch_bounds__({STAGE_BLOCK}) egg_conv_xt(float* __restrict__ out, const float* __restrict__ X) {{
    // {p.C} channels: the 32x32 transpose tile would leave {32 - p.C} of its 32 rows idle (level 2 task 57's 8 channels:
    // 1.3 TB/s on the H200). A warp reads 128 bytes of each channel; the block's pixels' channels, one contiguous
    // run of the output, are written from shared memory 128 bytes a warp (a thread's own {p.C} floats stored
    // one by one touched {p.C} times the sectors: 0.54 ms for task 67's 268 MB, 1.41 as two planes, on the H100)
    __shared__ float tile[{STAGE_BLOCK * (p.C + 1)}];  // a pixel's channels, padded to {p.C + 1}: no bank conflict
    const long long s0 = (long long)blockIdx.x * {STAGE_BLOCK}, s = s0 + threadIdx.x, img = blockIdx.z;
    if (s < {S}LL) {{
        const float* xb = X + img * {p.C_task * S}LL + s;
        #pragma unroll
        for (int c = 0; c < {p.C_task}; ++c) tile[threadIdx.x * {p.C + 1} + c] = xb[(long long)c * {S}LL];{pad}
    }}
    __syncthreads();
    const int n = (int)min((long long){STAGE_BLOCK}, {S}LL - s0) * {p.C};
    float* ob = out + (img * {S}LL + s0) * {p.C}LL;
    for (int j = threadIdx.x; j < n; j += {STAGE_BLOCK}) {put("ob", "j", f"tile[(j / {p.C}) * {p.C + 1} + j % {p.C}]", xl)}
}}
"""
    else:
        xt = f"""
extern "C" __global__ void __launch_bounds__({STAGE_BLOCK}) egg_conv_xt(float* __restrict__ out, const float* __restrict__ X) {{
    __shared__ float tile[32][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const long long s0 = (long long)blockIdx.x * 32, img = blockIdx.z;
    const int c0 = blockIdx.y * 32;
    const float* xb = X + img * {p.C * S}LL;
    float* ob = out + img * {p.C * S}LL;
    for (int j = ty; j < 32; j += {STAGE_BLOCK // 32}) {{
        const int c = c0 + j; const long long s = s0 + tx;
        if (c < {p.C} && s < {S}LL) tile[j][tx] = xb[(long long)c * {S}LL + s];
    }}
    __syncthreads();
    for (int j = ty; j < 32; j += {STAGE_BLOCK // 32}) {{
        const long long s = s0 + j; const int c = c0 + tx;
        if (c < {p.C} && s < {S}LL) {put("ob", f"s * {p.C}LL + c", "tile[tx][j]", xl)}
    }}
}}
"""
    E = p.groups * p.R * p.OCg * p.Kg
    # the weight's index in 32 bits where it fits (every KernelBench conv's): unsigned divides by constants are a
    # multiply and a shift, 64-bit ones a long sequence each, five an element
    u, ity = ("u", "unsigned") if E < 2 ** 31 else ("LL", "long long")
    return xt + f"""
extern "C" __global__ void __launch_bounds__({STAGE_BLOCK}) egg_conv_wt(float* __restrict__ out, const float* __restrict__ W) {{
    const {ity} i = ({ity})blockIdx.x * {STAGE_BLOCK}{u} + threadIdx.x;
    if (i >= {E}{u}) return;
    const {ity} ic = i % {p.Cg}{u}, oc = (i / {p.Kg}{u}) % {p.OCg}{u};
    const int res = (int)((i / {p.OCg * p.Kg}{u}) % {p.R}{u}), g = (int)(i / {p.R * p.OCg * p.Kg}{u});
    int r_ = (int)((i / {p.Cg}{u}) % {math.prod(p.taps)}{u});
    bool ok = {f"ic < {p.C_task}{u};  // (false: the staged pad's channels)" if p.cin else "true;"}
{_weight_taps(p)}
    {put("out", "i", f"W[{src_w}]", wl, "ok")}
}}
"""


def _weight_taps(p: ConvPlan) -> str:
    """Staged weight column (tap, channel) -> the kernel offset `off` (and `ok`: a real tap)."""
    ind = "    "
    lines = [f"{ind}(void)res;"] + _tap_decode(p, ind, "ok", _phase_decode(p, "res", ind) if p.phased else [])
    kst, terms = 1, []
    for d in reversed(range(p.nd)):
        terms.append(f"k{d} * {kst}" if kst != 1 else f"k{d}")
        kst *= p.ker[d]
    lines.append(f"{ind}const long long off = ok ? " + " + ".join(terms) + " : 0;")
    return "\n".join(lines)


FEW_CHANNELS = 16  # at most this many input channels: the staging transpose takes a thread a pixel


def few_channels(p: ConvPlan) -> bool:
    return p.C <= FEW_CHANNELS


def plane_sizes(p: ConvPlan) -> tuple[int, int]:
    """Floats in one plane of the staged input and of the staged weight: where the low plane starts."""
    return p.N * math.prod(p.in_sp) * p.C, p.groups * p.R * p.OCg * p.Kg


def staging(p: ConvPlan, planes: bool = False) -> list[tuple[str, tuple, tuple, list, Node]]:
    """The staging launches in order: (kernel, grid, block, the tensors it reads, the node it writes);
    the written nodes are the GEMM's X and W (`arg_order(..., staged)`); `planes`: both as two TF32 planes."""
    x, w = p.conv.args[0], p.conv.args[1]
    S = math.prod(p.in_sp)
    if p.N > 65535 or -(-p.C // 32) > 65535:
        raise Unsupported("more than 65535 images or channel blocks to stage")
    xt, wt = staged_nodes(p, planes)
    xgrid = (-(-S // STAGE_BLOCK), 1, p.N) if few_channels(p) else (-(-S // 32), -(-p.C // 32), p.N)
    return [("egg_conv_xt", xgrid, (STAGE_BLOCK,), [x], xt),
            ("egg_conv_wt", (-(-(p.groups * p.R * p.OCg * p.Kg) // STAGE_BLOCK),), (STAGE_BLOCK,), [w], wt)]


def staged_nodes(p: ConvPlan, planes: bool = False) -> tuple[Node, Node]:
    x, n = p.conv.args[0], 2 if planes else 1
    xt = Node(f"{p.conv.name}_xt", "input", shape=(n * p.N, *p.in_sp, p.C), dtype=x.dtype)
    wt = Node(f"{p.conv.name}_wt", "input", shape=(n * p.groups * p.R, p.OCg, p.Kg), dtype=x.dtype)
    return xt, wt


def grid(p: ConvPlan, k: GemmKnobs, layout: str = "nchw") -> tuple[int, int, int]:
    """Pixel tiles on x (millions of them at KernelBench's sizes), channel tiles on y, groups (and,
    channels last, phases) on z."""
    z = p.groups * {"nhwc": p.R, "gemm": p.N}.get(layout, 1) * splits(p, k, layout)[0]
    if -(-p.OCg // k.BN) > 65535 or z > 65535:
        raise Unsupported("more than 65535 channel tiles or groups")
    rows = {"nhwc": p.Mg, "gemm": math.prod(p.in_sp)}.get(layout, p.M)
    return (-(-rows // k.BM), -(-p.OCg // k.BN), z)


def aligned16(p: ConvPlan, k: GemmKnobs, layout: str) -> bool:
    """Whether the kernel copies 16 bytes at a time from the task's own tensors (the host then checks
    their alignment); staged tensors are the module's own allocations."""
    return layout == "gemm" and any(o.vec == 4 for o in operands(p, k, layout))
