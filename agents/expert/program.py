"""Several kernels where one cannot do it: a convolution or GEMM whose result (after its fused
pointwise epilogue) feeds a reduction, a norm or a pooling, and chains of those (pool then reduce,
a norm then a reduction over other dims). The graph is cut at a tensor that one heavy op reads: the
part before it is one kernel (the first one, the producer, is what the stages tune), the part after
is planned again, and may be cut again. Each cut tensor is written once and read once; eager makes
one pass per op instead."""
from __future__ import annotations

from dataclasses import dataclass, replace

from agents.expert.opgraph import REMAPS, Node, OpGraph, Unsupported, _flat, ancestors, unview
from agents.expert.templates import conv_sum, gemm_sum

PRODUCERS = ("conv", "gemm")
HEAVY = ("conv", "gemm", "pool", "reduce", "scan", "rnn")
LEAVES = ("input", "param")
SINGLE = ("conv", "gemm", "pool", "rows", "pointwise", "scan", "direct_conv", "recurrent", "conv_sum", "gemm_sum")  # no workspace
MAX_STAGES = 64  # a transformer block is a dozen regions, a VGG-16 two dozen


@dataclass
class Program:
    first: OpGraph  # inputs -> ... -> the cut tensor
    second: OpGraph  # the cut tensor (as an input) and the rest -> the task's output
    mid: Node  # the cut tensor, as the first graph's output
    fam1: str
    plan1: object
    fam2: str  # a single-kernel family, or "program" (cut again)
    plan2: object

    @property
    def mid_input(self) -> Node:
        """The cut tensor as the second graph's input (named `egg_mid<depth>`)."""
        return self.second.inputs[0]

    @property
    def tuned(self) -> int:
        """The stage the stages' knobs tune: the first convolution or GEMM (the heavy kernel), else the first."""
        fams = [s[1] for s in self.stages()]
        return next((i for i, f in enumerate(fams) if f in PRODUCERS), 0)

    def stages(self) -> list[tuple[OpGraph, str, object, Node]]:
        """(graph, family, plan, the node it writes) per kernel, in launch order."""
        head = [(self.first, self.fam1, self.plan1, self.mid_input)]
        if self.fam2 == "program":
            return head + self.plan2.stages()
        return head + [(self.second, self.fam2, self.plan2, self.second.output)]


def candidates(g: OpGraph) -> list[Node]:
    """Tensors to cut at, earliest first: what each heavy op after the first one reads (through any
    reshape, which goes with the reader), where it is computed."""
    heavy = [n for n in g.nodes if n.kind in HEAVY]
    out, seen = [], set()

    def add(mid):
        if isinstance(mid, Node) and mid.kind not in LEAVES and id(mid) not in seen and mid is not g.output:
            seen.add(id(mid))
            out.append(mid)
    # the first heavy op's computed matmul or conv operands last: a pointwise front that materialises one
    # (a permuted k^T, an SE block's x * s) is the fallback when nothing else splits
    viewed = []  # a conv reads its input only as a leaf: the view itself, written in its shape, is a cut too
    for h in heavy[1:] + [h for h in heavy[:1] if h.kind in ("gemm", "conv")]:
        for mid in h.args[:2] if h.kind == "gemm" else h.args[:1]:  # both matmul operands may be computed
            if h.kind == "conv" and isinstance(mid, Node) and mid.kind == "pw" and mid.op == "view":
                viewed.append(mid)
            mid = unview(mid)
            add(mid)
            base = mid  # read through a slice or permutation: the tensor under it is a cut too (attention's qkv)
            while isinstance(base, Node) and base.kind == "pw" and (base.op in REMAPS or base.op == "view"):
                base = base.args[0]
            if base is not mid:
                add(base)
    for v in viewed:
        add(v)
    if heavy:
        # the last heavy op's own result: its tail of pointwise ops as a kernel of its own (a tail that
        # broadcasts the result into a new layout, which the heavy op's write pass cannot index)
        add(heavy[-1])
        # and what a slice, concatenation or permutation after a heavy op reads (a softmax's result, which
        # is more than its last reduction): the element-moving tail then reads it as an input
        hv = {id(h) for h in heavy}
        for n in g.nodes:
            if n.kind == "pw" and n.op in REMAPS and isinstance(n.args[0], Node) and hv & ancestors(n.args[0]):
                add(n.args[0])
        # and each heavy op with its own epilogue (the pointwise ops only it feeds, e.g. a downsample
        # conv's batch norm before a residual add joins it with another branch)
        readers: dict[int, list[Node]] = {}
        for n in g.nodes:
            for a in {id(a): a for a in _flat(n.args) if isinstance(a, Node)}.values():
                readers.setdefault(id(a), []).append(n)
        for h in heavy:
            add(_epilogue_end(g, h, hv, readers))
    return out


def _epilogue_end(g: OpGraph, h: Node, heavy: set[int], readers: dict[int, list[Node]]) -> Node:
    """The last node of the pointwise chain after `h` that reads no other computed tensor: each link the
    only reader of the one before it (`readers`: each node's, by id), of the same shape (no broadcast
    growing it), its other operands leaves or their pointwise functions."""
    end = h
    while len(rd := readers.get(id(end), [])) == 1 and rd[0].kind == "pw" and rd[0].op not in REMAPS \
            and rd[0] is not g.output and tuple(rd[0].shape) == tuple(end.shape):
        others = [a for a in _flat(rd[0].args) if isinstance(a, Node) and a is not end]
        if any(heavy & ancestors(a) for a in others):
            break
        end = rd[0]
    return end


def cut_at(g: OpGraph, mid: Node, depth: int = 0) -> tuple[OpGraph, OpGraph] | None:
    """(the graph up to `mid`, the rest with `mid` as an input), or None where the rest reads the
    first part somewhere else than at `mid` (other than pointwise values of leaves alone, such as a zero
    initial state two LSTM layers read: those both parts compute)."""
    front = ancestors(mid)
    back = [n for n in g.nodes if id(n) not in front]
    reads = {id(a): a for n in back if n.kind not in LEAVES for a in _flat(n.args)
             if isinstance(a, Node) and id(a) in front and a is not mid and a.kind not in LEAVES}
    dup: set[int] = set()
    for a in reads.values():
        anc = ancestors(a)
        if id(mid) in anc or any(x.kind not in LEAVES + ("pw",) for x in g.nodes if id(x) in anc):
            return None
        dup |= anc
    back = [n for n in g.nodes if id(n) not in front or id(n) in dup]
    first = OpGraph(nodes=[n for n in g.nodes if id(n) in front], inputs=[n for n in g.inputs if id(n) in front],
                    params=[n for n in g.params if id(n) in front], output=mid, aten_ops=g.aten_ops, scalars=g.scalars)
    # a fixed name: node names come from a process-wide counter, the generated code must not
    as_input = Node(f"egg_mid{depth}", "input", shape=tuple(mid.shape), dtype=mid.dtype, index=-1)
    clone: dict[int, Node] = {id(mid): as_input}

    def remap(a):
        if isinstance(a, (list, tuple)):
            return type(a)(remap(x) for x in a)
        return clone.get(id(a), a) if isinstance(a, Node) else a
    nodes = [as_input]
    for n in g.nodes:
        if id(n) in front and id(n) not in dup:
            continue
        c = n if n.kind in LEAVES else replace(n, args=[remap(a) for a in n.args])
        clone[id(n)] = c
        nodes.append(c)
    if id(g.output) not in clone:
        return None
    used = ancestors(clone[id(g.output)])
    second = OpGraph(nodes=[n for n in nodes if id(n) in used],
                     inputs=[as_input] + [n for n in g.inputs if id(n) in used],
                     params=[n for n in g.params if id(n) in used], output=clone[id(g.output)],
                     aten_ops=g.aten_ops, scalars=[])
    return first, second


def cut(g: OpGraph) -> tuple[OpGraph, OpGraph, Node] | None:
    """The earliest cut, or None."""
    for mid in candidates(g):
        c = cut_at(g, mid)
        if c is not None:
            return (*c, mid)
    return None


def plan_program(g: OpGraph, plan_graph, depth: int = 0) -> Program:
    """`plan_graph(g) -> (family, plan)` is the agent's own planner (which comes back here for a
    graph one kernel cannot do). The first part must be one kernel; the rest may be cut again."""
    if depth >= MAX_STAGES - 1:
        raise Unsupported(f"more than {MAX_STAGES} kernels")
    why, fallback = "no tensor to cut at", None
    mids = candidates(g)
    for fam_sum, find in (("conv_sum", conv_sum.find), ("gemm_sum", gemm_sum.find)):
        if find(g) is None:  # a conv or matmul only summed (no output kept): first the cut that keeps them together
            continue
        for mid in mids:
            c = cut_at(g, mid, depth)
            if c is None or find(c[0]) is None:
                continue
            try:
                fam1, plan1 = plan_graph(c[0], single=True)
                if fam1 == fam_sum:
                    fam2, plan2 = plan_graph(c[1], depth=depth + 1)
                    if fam2 in SINGLE + ("program",):
                        return Program(c[0], c[1], mid, fam1, plan1, fam2, plan2)
            except Unsupported:
                continue
    for mid in mids:
        c = cut_at(g, mid, depth)
        if c is None:
            continue
        first, second = c
        try:
            fam1, plan1 = plan_graph(first, single=True)
            fam2, plan2 = plan_graph(second, depth=depth + 1)
        except Unsupported as exc:
            why = str(exc)
            continue
        if fam1 not in SINGLE or fam2 not in SINGLE + ("program",):
            why = f"a {fam1} kernel then a {fam2} kernel"
            continue
        prog = Program(first, second, mid, fam1, plan1, fam2, plan2)
        if fam1 == "pointwise":  # a front of pointwise ops alone belongs fused into its reader: a later cut, if any
            fallback = fallback or prog
            continue
        return prog
    if fallback is not None:
        return fallback
    raise Unsupported(f"no way to split it into kernels the expert has ({why})")
