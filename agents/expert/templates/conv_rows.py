"""A convolution whose channels are reduced right after it, in its own epilogue: level 2's conv then a min, a
softmax or a logsumexp over dim 1 (tasks 25 32 36 49 58 91), with pointwise steps before, between and after.

On the warpgroup MMA (channels last, plain TF32 or 3xTF32 on staged planes) a block's tile holds all of a
group's output channels where the conv has one group and at most 256 of them (BN >= OC): register (ni, h, e)
of a thread is row g + 8h, column ni * 8 + 2t + e (the m64nNk8 D fragment), so one pixel's channels lie in
the four threads of a quad. A reduction is each thread's own values, then two quad shuffles (xor 1, 2);
a later reduction reads the earlier ones' results (softmax: the max, then the sum of exps). A reduced
output (min, logsumexp) is stored once a pixel by lane t == 0; a full one (softmax) once an element,
normalised. The conv's output is never written and read back (the row kernel after it is gone)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents.expert.codegen import CTYPE, Emitter
from agents.expert.opgraph import REMAPS, Node, OpGraph, Unsupported, ancestors
from agents.expert.templates import conv
from agents.expert.templates.conv import ConvPlan, plan_of

OPS = {"sum": ("0.0f", "{a} + {b}"),  # max/min keep a NaN (the prelude's egg_max/egg_min; b first: a tie keeps a)
       "amax": ("-INFINITY", "egg_max({b}, {a})"),
       "amin": ("INFINITY", "egg_min({b}, {a})")}
MAX_CHANNELS = 256  # the widest wgmma tile: a block holds every channel of the conv


@dataclass
class ConvRowsPlan:
    conv: ConvPlan
    reduces: list  # the reductions over the conv's channels, in the order they are computed
    full_output: bool  # the output has the conv's shape (softmax); else one value a pixel

    @property
    def osp(self) -> int:
        return math.prod(self.conv.out_sp)


def find(g: OpGraph) -> Node | None:
    """The conv whose channels a reduction of `g` reduces (over dim 1, of the conv's shape), if any."""
    cs = [n for n in g.nodes if n.kind == "conv"]
    if len(cs) != 1:
        return None
    full = tuple(cs[0].shape)
    rs = [n for n in g.nodes if n.kind == "reduce"]
    return cs[0] if rs and all(tuple(r.dims) == (1,) and tuple(r.args[0].shape) == full for r in rs) else None


def reduces_after_conv(g: OpGraph, dims) -> bool:
    """Whether some reduction of `g` (a program's graph: many convs) reduces a conv-shaped tensor downstream of a
    conv over `dims(rank)`: the planner's cut then first keeps them together."""
    convs = [n for n in g.nodes if n.kind == "conv"]
    for r in g.nodes:
        if r.kind == "reduce" and tuple(r.dims) == tuple(dims(len(r.args[0].shape))):
            anc = ancestors(r)
            if any(id(c) in anc and tuple(r.args[0].shape) == tuple(c.shape) for c in convs):
                return True
    return False


def reduces_channels(g: OpGraph) -> bool:
    """A conv's channels reduced right after it (dim 1)."""
    return reduces_after_conv(g, lambda rank: (1,))


def only_conv_and(g: OpGraph, cv: Node | None, what: str) -> Node:
    """`cv`, the one conv of `g` that `what` (its epilogue's reduction) follows, where nothing but pointwise steps and
    reductions lies beside them."""
    if cv is None:
        raise Unsupported(f"no convolution with a {what}")
    bad = [n for n in g.nodes if n.kind not in ("input", "param", "pw", "reduce", "conv")]
    if bad:
        raise Unsupported(f"a {bad[0].kind} beside the conv and its {what}")
    return cv


def plan_conv_rows(g: OpGraph) -> ConvRowsPlan:
    cv = only_conv_and(g, find(g), "reduction over its channels")
    full = tuple(cv.shape)
    n_full = math.prod(full)
    n_red = n_full // full[1]
    reduces = [n for n in g.nodes if n.kind == "reduce"]
    for r in reduces:
        if r.op not in OPS:
            raise Unsupported(f"a channel reduction {r.op} (sum, amax, amin are fused)")
    for n in g.nodes:
        if n.kind != "pw":
            continue
        if n.op in REMAPS:
            raise Unsupported(f"{n.op} between the conv and its output (the epilogue reads its own element)")
        size = math.prod(n.shape)
        if size not in (n_full, n_red) or (n.op != "view" and tuple(n.shape) not in (full, _reduced(full, True),
                                                                                     _reduced(full, False))):
            raise Unsupported(f"a tensor of shape {tuple(n.shape)} between the conv and its channel reductions")
    p = plan_of(cv)
    if p.groups != 1 or p.OC > MAX_CHANNELS:
        raise Unsupported(f"a conv of {p.groups} group(s), {p.OC} channels: a block holds one group's <= {MAX_CHANNELS}")
    if conv.default_layout(p) != "nhwc":  # few channels, not phased: the conv family's own first design is the direct
        # conv or the in-place gather (level 2 task 6's 3-channel conv3d: the direct conv, 1.70x compile on the H200)
        raise Unsupported("a conv the channels-last implicit GEMM does not take first")
    out_full = math.prod(g.output.shape) == n_full
    if not out_full and _reaches_full(g.output, {id(r) for r in reduces}, n_full):
        raise Unsupported("an output of one value a pixel that reads the channels other than through a reduction")
    return ConvRowsPlan(p, _ordered(g, reduces), out_full)


def _reduced(full: tuple, keep: bool) -> tuple:
    return (full[0], 1, *full[2:]) if keep else (full[0], *full[2:])


def _reaches_full(n: Node, stops: set[int], n_full: int) -> bool:
    """Whether n's value reads a full-shape (per channel) node without passing a reduction."""
    stack, seen = [n], set()
    while stack:
        x = stack.pop()
        if not isinstance(x, Node) or id(x) in seen or id(x) in stops:
            continue
        seen.add(id(x))
        if x.kind in ("pw", "conv") and math.prod(x.shape) == n_full:
            return True
        stack.extend(a for a in x.args if isinstance(a, Node))
    return False


def _ordered(g: OpGraph, reduces: list) -> list:
    """The reductions in graph order (a later one may read an earlier one's result, never the reverse)."""
    at = {id(n): i for i, n in enumerate(g.nodes)}
    return sorted(reduces, key=lambda r: at[id(r)])


def thread_rows(p: ConvPlan, rows: str) -> list[str]:
    """The channels-last wgmma tile's two rows of this thread (g + 8h below `rows`): whether each is a pixel
    (`live_h`), its image and its output pixel, from the block's `rowinfo`."""
    F = p.nd + 2
    out = []
    for h in range(2):
        out += [f"    const int* oinfo_{h} = rowinfo + (int)({rows} + g + {8 * h}) * {F};",
                f"    const bool live_{h} = oinfo_{h}[0] >= 0;  // image -1: a row past this phase's pixels",
                f"    const long long img_{h} = live_{h} ? oinfo_{h}[0] : 0, pix_{h} = live_{h} ? oinfo_{h}[{F - 1}] : 0;"]
    return out


def conv_value(p: ConvPlan, h: int) -> str:
    """The conv's value (its bias added) in register (ni, h, e) of the D fragment, at channel `oc`."""
    a = f"acc[0][ni][{2 * h} + e]"
    return f"({a} + to_f({p.bias.name}[oc]))" if p.bias is not None else a


def epilogue(g: OpGraph, plan: ConvRowsPlan, NI: int, rows: str) -> str:
    """The wgmma conv's epilogue (in place of gemm_tf32._wg_store) over a tile holding every channel."""
    p = plan.conv
    osp, OC = plan.osp, p.OC
    lines = ["    cp_async_wait<0>();"] + thread_rows(p, rows)

    def special(h: int):
        def sp(n):
            if n is p.conv:
                return conv_value(p, h)
            if any(n is r for r in plan.reduces):
                return f"red{_index(plan, n)}_{h}"
            return None
        return sp

    def per_channel(h: int, body) -> list[str]:
        """A loop over the thread's channels of row h: `body(emitter, oi)` gives the statements at channel oc."""
        em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", special(h), prefix=f"c{h}_")
        inner = body(em, "oi")
        pre = "\n".join("                " + ln for ln in em.lines)
        return [f"    #pragma unroll\n    for (int ni = 0; ni < {NI}; ++ni)",
                "        #pragma unroll\n        for (int e = 0; e < 2; ++e) {",
                "            const long long oc = ni * 8 + 2 * t + e;",
                f"            if (oc < {OC}LL) {{",
                f"                const long long oi = (img_{h} * {OC}LL + oc) * {osp}LL + pix_{h};",
                pre, *("                " + s for s in inner), "            }", "        }"]

    for j, r in enumerate(plan.reduces):
        init, comb = OPS[r.op]
        for h in range(2):
            acc = f"red{j}_{h}"
            lines.append(f"    float {acc} = {init};")
            lines += per_channel(h, lambda em, oi, acc=acc, r=r, comb=comb: [
                f"{acc} = {comb.format(a=acc, b=em.value(r.args[0], oi))};"])
            for lane in (1, 2):  # the quad: the row's other channels
                lines.append(f"    {{ const float o = __shfl_xor_sync(0xffffffffu, {acc}, {lane}); "
                             f"{acc} = {comb.format(a=acc, b='o')}; }}")
    ct = CTYPE[g.output.dtype]
    for h in range(2):
        if plan.full_output:
            lines.append(f"    if (live_{h}) {{")
            lines += ["    " + ln for ln in per_channel(h, lambda em, oi: [
                f"out[{oi}] = from_f<{ct}>({em.value(g.output, oi)});"])]
            lines.append("    }")
        else:
            em = Emitter(lambda t, i: f"to_f({t.name}[{i}])", special(h), prefix=f"o{h}_")
            v = em.value(g.output, "ri")
            lines += [f"    if (live_{h} && t == 0) {{", f"        const long long ri = img_{h} * {osp}LL + pix_{h};",
                      *("        " + ln for ln in em.lines), f"        out[ri] = from_f<{ct}>({v});", "    }"]
    return "\n".join(lines) + "\n}\n"


def render(g: OpGraph, plan: ConvRowsPlan, k, split: int) -> str:
    """The conv kernel `egg_conv` (conv.render's channels-last wgmma kernel) with this epilogue."""
    if not k.wgmma or k.BN < plan.conv.OC:
        raise Unsupported("the channel reductions need the warpgroup MMA's tile over every channel")
    return conv._render(g, plan.conv, k, split, "nhwc", epilogue=epilogue(g, plan, k.BN // 8, "wg * 64 + wq * 16"))


def static_bytes(plan: ConvRowsPlan, k) -> int:
    """The epilogue's own shared memory: none (the quad's shuffles)."""
    return 0


def after(plan: ConvRowsPlan, k, tensors: list, sms: int, tpsm: int) -> tuple[Node | None, list]:
    """The node the conv kernel writes (None: the output) and the launches after it, as conv_sum.launches gives them."""
    return None, []


def summary(plan: ConvRowsPlan, k) -> str:
    return (f", its channel reduction(s) [{', '.join(r.op for r in plan.reduces)}] in the epilogue (each thread's columns, "
            f"then the quad's by shuffles), " + ("every element stored normalised" if plan.full_output else
                                                  "one value a pixel stored") + f", {k.stages}-stage cp.async ring")


def how(plan: ConvRowsPlan) -> str:
    return (f"a tile holding every channel, the reduction(s) over the channels [{', '.join(r.op for r in plan.reduces)}] "
            f"and the pointwise steps around them in the epilogue: the conv's output never written")


def _index(plan: ConvRowsPlan, n: Node) -> int:
    return next(i for i, r in enumerate(plan.reduces) if r is n)
