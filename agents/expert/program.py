"""Several kernels where one cannot do it: a convolution or GEMM whose result (after its fused
pointwise epilogue) feeds a reduction, a norm or a pooling, and chains of those (pool then reduce,
a norm then a reduction over other dims). The graph is cut at a tensor that one heavy op reads: the
part before it is one kernel (the first one, the producer, is what the stages tune), the part after
is planned again, and may be cut again. Each cut tensor is written once and read once; eager makes
one pass per op instead."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from agents.expert.opgraph import REMAPS, Node, OpGraph, Unsupported, _flat, ancestors, unview
from agents.expert.templates import conv_rows, conv_stats, conv_sum, gemm_sum

PRODUCERS = ("conv", "gemm", "attention")
HEAVY = ("conv", "gemm", "pool", "reduce", "scan", "rnn", "attention")
LEAVES = ("input", "param")
SINGLE = ("attention", "conv", "gemm", "pool", "rows", "grid", "pointwise", "scan", "direct_conv", "recurrent", "conv_sum", "gemm_sum",
          "conv_rows", "conv_pooled", "conv_stats")  # a stage's families
MAX_STAGES = 1024  # a transformer block is a dozen regions, a VGG-16 two dozen, a ResNet-101 trained-mode
# (batch statistics) several hundred


class Bits:
    """One graph's ancestor sets as bit masks over its node list (which is in topological order), built in
    one pass: a program's planner asks for hundreds of cuts a level, each an ancestor set and the
    readers across it, and set-of-ids walks made a ResNet-101 take minutes."""

    def __init__(self, g: OpGraph):
        self.nodes = g.nodes
        self.pos = {id(n): i for i, n in enumerate(g.nodes)}
        self.anc, self.args, self.outside = [], [], {}
        self.leaves = self.impure = self.heavy = self.producers = 0
        for i, n in enumerate(g.nodes):
            a = anc = 0
            for x in _flat(n.args):
                j = self.pos.get(id(x)) if isinstance(x, Node) else None
                if j is None:  # a constant, or a leaf outside the list (see `of`)
                    if isinstance(x, Node):
                        self.outside.setdefault(i, []).append(id(x))
                    continue
                if j >= i:
                    raise ValueError("op graph not in topological order")
                a |= 1 << j
                anc |= self.anc[j]
            self.args.append(a)
            self.anc.append(anc | (1 << i))
            bit = 1 << i
            if n.kind in LEAVES:
                self.leaves |= bit
            elif n.kind != "pw":
                self.impure |= bit
            if n.kind in HEAVY:
                self.heavy |= bit
            if n.kind in PRODUCERS:
                self.producers |= bit

    def of(self, n: Node) -> int:
        """`n`'s ancestors; none for a leaf outside the node list (a cut's rest lists a parameter that both
        parts read among its params, not its nodes)."""
        i = self.pos.get(id(n))
        if i is None:
            assert n.kind in LEAVES, n
            return 0
        return self.anc[i]

    def members(self, mask: int) -> set[int]:
        """The ids of the nodes in `mask`, and of the leaves outside the list they read."""
        ids = set()
        for i, n in enumerate(self.nodes):
            if mask >> i & 1:
                ids.add(id(n))
                ids.update(self.outside.get(i, ()))
        return ids


def bits(g: OpGraph) -> Bits:
    """`g`'s masks, built once a graph (a graph is not changed after it is made)."""
    b = g.__dict__.get("_bits")
    if b is None or b.nodes is not g.nodes or len(b.pos) != len(g.nodes):
        b = g.__dict__["_bits"] = Bits(g)
    return b


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
        got = self.__dict__.get("_tuned")
        if got is None:
            fams = [s[1] for s in self.stages()]
            got = self.__dict__["_tuned"] = next((i for i, f in enumerate(fams) if f in PRODUCERS), 0)
        return got

    def stages(self) -> tuple[tuple[OpGraph, str, object, Node], ...]:
        """(graph, family, plan, the node it writes) per kernel, in launch order (listed once, and not
        copied: a program is not changed after it is planned, and emitting asks for every kernel's stage)."""
        got = self.__dict__.get("_stages")
        if got is None:
            got = self.__dict__["_stages"] = tuple(self._list_stages())
        return got

    def _list_stages(self) -> list[tuple[OpGraph, str, object, Node]]:
        out, p = [], self
        while True:  # a loop, not recursion: a whole network is hundreds of links
            out.append((p.first, p.fam1, p.plan1, p.mid_input))
            if p.fam2 != "program":
                return out + [(p.second, p.fam2, p.plan2, p.second.output)]
            p = p.plan2


def candidates(g: OpGraph) -> list[Node]:
    """Tensors to cut at, earliest first: what each heavy op after the first one reads (through any
    reshape, which goes with the reader), where it is computed."""
    heavy = [n for n in g.nodes if n.kind in HEAVY]
    B = bits(g)
    out, seen = [], set()

    def add(mid):
        if isinstance(mid, Node) and mid.kind not in LEAVES and id(mid) not in seen and mid is not g.output:
            seen.add(id(mid))
            out.append(mid)
    # the first heavy op's computed matmul or conv operands last: a pointwise front that materialises one
    # (a permuted k^T, an SE block's x * s) is the fallback when nothing else splits
    viewed = []  # a conv reads its input only as a leaf: the view itself, written in its shape, is a cut too
    for h in heavy[1:] + [h for h in heavy[:1] if h.kind in ("gemm", "conv", "attention")]:
        # computed operands (an attention's computed side input too: Swin V2's position-bias table)
        for mid in h.args[:2] if h.kind == "gemm" else h.args if h.kind == "attention" else h.args[:1]:
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
        for n in g.nodes:
            if n.kind == "pw" and n.op in REMAPS and isinstance(n.args[0], Node) and B.heavy & B.of(n.args[0]):
                add(n.args[0])
        # and each heavy op with its own epilogue (the pointwise ops only it feeds, e.g. a downsample
        # conv's batch norm before a residual add joins it with another branch)
        readers = g.readers()
        for h in heavy:
            add(_epilogue_end(g, h, B, readers))
    return out


def _epilogue_end(g: OpGraph, h: Node, B: Bits, readers: dict[int, list[Node]]) -> Node:
    """The last node of the pointwise chain after `h` that reads no other computed tensor: each link the
    only reader of the one before it (`readers`: each node's, by id), of the same shape (no broadcast
    growing it), its other operands leaves or their pointwise functions."""
    end = h
    while len(rd := readers.get(id(end), [])) == 1 and rd[0].kind == "pw" and rd[0].op not in REMAPS \
            and rd[0] is not g.output and tuple(rd[0].shape) == tuple(end.shape):
        others = [a for a in _flat(rd[0].args) if isinstance(a, Node) and a is not end]
        if any(B.heavy & B.of(a) for a in others):
            break
        end = rd[0]
    return end


def cut_at(g: OpGraph, mid: Node, depth: int = 0) -> tuple[OpGraph, OpGraph] | None:
    """(the graph up to `mid`, the rest with `mid` as an input), or None where the rest reads the
    first part somewhere else than at `mid` (other than pointwise values of leaves alone, such as a zero
    initial state two LSTM layers read: those both parts compute)."""
    B = bits(g)
    i = B.pos[id(mid)]
    fmask = B.anc[i]
    back_reads = 0
    for j, n in enumerate(g.nodes):
        if not fmask >> j & 1 and n.kind not in LEAVES:
            back_reads |= B.args[j]
    reads = back_reads & fmask & ~B.leaves & ~(1 << i)
    dmask = 0
    while reads:
        k = (reads & -reads).bit_length() - 1
        reads &= reads - 1
        if B.anc[k] >> i & 1 or B.anc[k] & B.impure:
            return None
        dmask |= B.anc[k]
    front, dup = B.members(fmask), B.members(dmask)
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


def plan_program(g: OpGraph, plan_graph, depth: int = 0, failed: dict | None = None) -> Program:
    """`plan_graph(g) -> (family, plan)` is the agent's own planner (which comes back here for a
    graph one kernel cannot do). The first part must be one kernel; the rest may be cut again.
    `failed` (structure -> (depth, why)) holds the rests found unplannable at a depth: the search backs
    off a failed rest and tries a later cut, and without it a network's repeated blocks made that
    exponential (a trained-mode ResNet-18 did not finish in minutes)."""
    failed = {} if failed is None else failed
    if depth >= MAX_STAGES - 1:
        raise Unsupported(f"more than {MAX_STAGES} kernels")
    key = g.structure()
    if key in failed and failed[key][0] <= depth:
        raise Unsupported(failed[key][1])
    try:
        return _plan_program(g, plan_graph, depth)
    except Unsupported as exc:
        failed[key] = (depth, str(exc))
        raise


def _plan_program(g: OpGraph, plan_graph, depth: int) -> Program:
    why = "no tensor to cut at"
    mids = candidates(g)
    B = bits(g)
    for fam_sum, find, part in (("conv_sum", conv_sum.find, conv_sum.find), ("gemm_sum", gemm_sum.find, gemm_sum.find),
                                ("conv_rows", conv_rows.reduces_channels, conv_rows.find),
                                ("conv_stats", conv_stats.follows_conv, conv_stats.find)):
        if not find(g):  # a conv or matmul only summed (no output kept), a conv's channels reduced: first the cut
            continue  # that keeps them together
        for mid in mids:
            if (B.of(mid) & B.producers).bit_count() != 1:
                continue  # its first part holds no conv or matmul, or two: no such single kernel (and a cut each is
                # quadratic over a network: DenseNet-201's transitions' convs before a BatchNorm, 120 s of planning)
            c = cut_at(g, mid, depth)
            if c is None or not part(c[0]):
                continue
            try:
                fam1, plan1 = plan_graph(c[0], single=True)
                if fam1 == fam_sum:
                    fam2, plan2 = plan_graph(c[1], depth=depth + 1)
                    if fam2 in SINGLE + ("program",):
                        return Program(c[0], c[1], mid, fam1, plan1, fam2, plan2)
            except Unsupported:
                continue
    deferred = []  # cuts whose first kernel is pointwise alone: that front belongs fused into its reader
    for mid in mids:
        if (B.of(mid) & B.producers).bit_count() >= 2:
            continue  # no single kernel holds two convolutions or matmuls: the first part cannot be one
        c = cut_at(g, mid, depth)
        if c is None:
            continue
        first, second = c
        try:
            fam1, plan1 = plan_graph(first, single=True)
        except Unsupported as exc:
            why = str(exc)
            continue
        if fam1 not in SINGLE:
            why = f"a {fam1} kernel first"
            continue
        if fam1 == "pointwise":  # a later cut, if any; its rest is planned only if none comes
            deferred.append((first, second, mid, fam1, plan1))
            continue
        prog = _rest(first, second, mid, fam1, plan1, plan_graph, depth)
        if isinstance(prog, Program):
            return prog
        why = prog
    for d in deferred:
        prog = _rest(*d, plan_graph, depth)
        if isinstance(prog, Program):
            return prog
        why = prog
    raise Unsupported(f"no way to split it into kernels the expert has ({why})")


def _rest(first, second, mid, fam1, plan1, plan_graph, depth) -> Program | str:
    """The program of this cut, with its rest planned (why not, where it cannot be)."""
    try:
        fam2, plan2 = plan_graph(second, depth=depth + 1)
    except Unsupported as exc:
        return str(exc)
    if fam2 not in SINGLE + ("program",):
        return f"a {fam1} kernel then a {fam2} kernel"
    return Program(first, second, mid, fam1, plan1, fam2, plan2)


def slice_leaves(sg: OpGraph) -> tuple[OpGraph, dict[str, tuple[int, int]]]:
    """A pointwise stage that reads a task input through contiguous slices (an RNN step's `x[t]`): each
    slice becomes an input of its own, `{name: (input position, element offset)}` in the returned dict,
    which the host code passes as a view of the input (no copy, no kernel). The stage's source then no
    longer holds the offset, so the same step at every t is one kernel launched on other views (a 256-step
    loop compiled 256 copies of it). A slice whose start is not 16-byte aligned stays as it is (vector loads)."""
    views, swap = {}, {}
    for n in sg.nodes:
        if not (n.kind == "pw" and n.op == "narrow" and isinstance(n.args[0], Node) and n.args[0].kind == "input"
                and n.args[0].index >= 0 and (len(n.args) < 4 or n.args[3] == 1)):
            continue
        x, d, start = n.args[:3]
        inner = math.prod(x.shape[d + 1:])
        if math.prod(x.shape[:d]) != 1 or (start * inner * _ITEM.get(x.dtype, 4)) % 16:
            continue
        leaf = Node(f"{x.name}_at{start * inner}", "input", shape=tuple(n.shape), dtype=x.dtype, index=-1)
        views[leaf.name] = (x.index, start * inner)
        swap[id(n)] = leaf
    if not swap:
        return sg, {}
    fresh = list(swap.values())

    def remap(a):
        if isinstance(a, (list, tuple)):
            return type(a)(remap(v) for v in a)
        return swap.get(id(a), a) if isinstance(a, Node) else a
    nodes = []
    for n in sg.nodes:
        if id(n) not in swap:
            c = n if n.kind in LEAVES else replace(n, args=[remap(a) for a in n.args])
            swap[id(n)] = c
            nodes.append(c)
    out = swap[id(sg.output)]
    used = ancestors(out)
    leaves = [v for v in fresh if id(v) in used]
    return (OpGraph(nodes=leaves + [n for n in nodes if id(n) in used],
                    inputs=[n for n in sg.inputs if id(n) in used] + leaves,
                    params=[n for n in sg.params if id(n) in used], output=out, aten_ops=sg.aten_ops,
                    scalars=sg.scalars), {v.name: views[v.name] for v in leaves})


_ITEM = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1}
