"""Two kernels where one cannot do it: a convolution or GEMM whose result (after its fused pointwise
epilogue) feeds a reduction, a normalisation or a pooling. The graph is cut at that tensor: the
first kernel (the heavy one, which the stages tune) writes it once, the second runs the template
that fits the rest (rows or pooling) on it. Eager makes one pass per op after the producer; this
makes one."""
from __future__ import annotations

from dataclasses import dataclass, replace

from agents.expert.opgraph import Node, OpGraph, Unsupported

PRODUCERS = ("conv", "gemm")
LEAVES = ("input", "param")


@dataclass
class Program:
    first: OpGraph  # inputs -> producer -> epilogue -> `mid`
    second: OpGraph  # `mid` (as an input) and the rest -> the task's output
    mid: Node  # the cut tensor, as the first graph's output
    fam1: str
    plan1: object
    fam2: str
    plan2: object

    @property
    def mid_input(self) -> Node:
        """The cut tensor as the second graph's input (named `egg_mid`)."""
        return self.second.inputs[0]


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def _ancestors(n: Node) -> set[int]:
    seen, stack = set(), [n]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack += [a for a in _flat(x.args) if isinstance(a, Node)]
    return seen


def cut(g: OpGraph) -> tuple[OpGraph, OpGraph, Node] | None:
    """(first graph, second graph, the cut tensor), or None where the task has no such cut."""
    prods = [n for n in g.nodes if n.kind in PRODUCERS]
    if len(prods) != 1:
        return None
    p = prods[0]
    after = [n for n in g.nodes if n.kind not in LEAVES + ("pw",) and n is not p and id(p) in _ancestors(n)]
    if not after:
        return None
    mid = after[0].args[0]
    while isinstance(mid, Node) and mid.kind == "pw" and mid.op == "view" and tuple(mid.shape) != tuple(p.shape):
        mid = mid.args[0]  # a reshape before the reduction (group norm's (N, G, ...) view) goes to the second kernel
    if not isinstance(mid, Node) or tuple(mid.shape) != tuple(p.shape) or id(p) not in _ancestors(mid):
        return None
    front = _ancestors(mid)
    back = [n for n in g.nodes if id(n) not in front]
    if any(n.kind not in LEAVES and any(isinstance(a, Node) and id(a) in front and a is not mid and a.kind not in LEAVES
                                        for a in _flat(n.args)) for n in back):
        return None  # the rest reads the producer's chain somewhere else than at the cut
    first = OpGraph(nodes=[n for n in g.nodes if id(n) in front], inputs=[n for n in g.inputs if id(n) in front],
                    params=[n for n in g.params if id(n) in front], output=mid, aten_ops=g.aten_ops, scalars=g.scalars)
    # a fixed name: node names come from a process-wide counter, the generated code must not
    as_input = Node("egg_mid", "input", shape=tuple(mid.shape), dtype=mid.dtype, index=-1)
    clone: dict[int, Node] = {id(mid): as_input}

    def remap(a):
        if isinstance(a, (list, tuple)):
            return type(a)(remap(x) for x in a)
        return clone.get(id(a), a) if isinstance(a, Node) else a
    nodes = [as_input]
    for n in g.nodes:
        if id(n) in front and n is not mid:
            continue
        if n is mid:
            continue
        c = n if n.kind in LEAVES else replace(n, args=[remap(a) for a in n.args])
        clone[id(n)] = c
        nodes.append(c)
    if id(g.output) not in clone:
        return None
    used = _ancestors(clone[id(g.output)])
    second = OpGraph(nodes=[n for n in nodes if id(n) in used],
                     inputs=[as_input] + [n for n in g.inputs if id(n) in used],
                     params=[n for n in g.params if id(n) in used], output=clone[id(g.output)],
                     aten_ops=g.aten_ops, scalars=[])
    return first, second, mid


def plan_program(g: OpGraph, plan_graph) -> Program:
    """`plan_graph(g) -> (family, plan)` is the agent's own planner, used on both halves."""
    c = cut(g)
    if c is None:
        raise Unsupported("a reduction after a matmul or convolution that cannot be cut into two kernels")
    first, second, mid = c
    fam1, plan1 = plan_graph(first)
    fam2, plan2 = plan_graph(second)
    if fam1 not in PRODUCERS or fam2 not in ("rows", "pool"):
        raise Unsupported(f"a {fam1} kernel then a {fam2} kernel (a two-kernel program takes a matmul or "
                          "convolution, then rows or pooling)")
    return Program(first, second, mid, fam1, plan1, fam2, plan2)
