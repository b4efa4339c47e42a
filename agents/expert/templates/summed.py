"""A heavy node (conv, matmul) whose output is only summed, never kept: the search both `conv_sum` and
`gemm_sum` plan from. Between the heavy node and the sum only affine steps may lie (v * c, v / c, -v,
v + c, v - c, c - v), c a constant or a tensor computed from the leaves alone, each step read by nothing
else: the chain is a * v + b, and a sum over dims along which a and b do not vary is a * sum(v) + count * b;
where they vary along the summed dims instead (a matmul's columns), a weights the sum and b's sum adds."""
from __future__ import annotations

import math

from agents.expert.codegen import bmap, lit
from agents.expert.opgraph import Node, OpGraph, Unsupported, _flat, ancestors, check_elementwise_after

AFFINE = ("mul", "div", "neg", "add", "sub", "rsub")  # rsub(u, w) = w - u


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def operand(n: Node, src: Node):
    """The step's other argument (a number or a node; None for a negation)."""
    return None if n.op == "neg" else (n.args[1] if n.args[0] is src else n.args[0])


def _affine(n: Node, src: Node) -> bool:
    if n.kind != "pw" or n.op not in AFFINE:
        return False
    if n.op == "neg":
        return len(n.args) == 1 and n.args[0] is src
    if len(n.args) != 2 or (n.args[0] is src) == (n.args[1] is src):  # exactly one argument is the chain
        return False
    if n.op == "div" and n.args[0] is not src:  # c / v is not affine
        return False
    c = operand(n, src)
    return _number(c) or isinstance(c, Node)


def _leaf_computed(g: OpGraph, c: Node, heavy: Node) -> bool:
    """A tensor operand computed element by element from the leaves alone (never from the heavy node)."""
    anc = ancestors(c)
    return id(heavy) not in anc and all(x.kind in ("input", "param", "pw") for x in g.nodes if id(x) in anc)


def tensor_operands(chain: list, heavy: Node) -> list[Node]:
    out, src = [], heavy
    for n in chain:
        if isinstance(c := operand(n, src), Node):
            out.append(c)
        src = n
    return out


def varies_along(t: Node, shape: tuple, dims) -> bool:
    """Whether operand t, broadcast to `shape`, changes along any of `dims`."""
    pad = (1,) * (len(shape) - len(t.shape)) + tuple(t.shape)
    return any(pad[d] != 1 for d in dims)


def coefficients(chain: list, heavy: Node, value, idx: str) -> tuple[str, str]:
    """The chain as a * v + b: C expressions of a and b at the heavy node's linear index `idx`;
    `value(node, idx)` emits an operand's element (an Emitter's)."""
    a, b, src = "1.0f", "0.0f", heavy
    for n in chain:
        c = operand(n, src)
        c = lit(c) if _number(c) else (value(c, bmap(c.shape, n.shape, idx)) if c is not None else None)
        if n.op == "neg":
            a, b = f"(-{a})", f"(-{b})"
        elif n.op == "mul":
            a, b = f"({a} * {c})", f"({b} * {c})"
        elif n.op == "div":
            a, b = f"({a} / {c})", f"({b} / {c})"
        elif n.op == "add":
            b = f"({b} + {c})"
        elif (n.args[0] is src) == (n.op == "sub"):  # v - c
            b = f"({b} - {c})"
        else:  # c - v
            a, b = f"(-{a})", f"({c} - {b})"
        src = n
    return a, b


def row_index(heavy: Node, dims) -> str:
    """The heavy node's linear index of the first element an output reduces (`o_lin` numbers the outputs;
    the summed dims are the trailing ones)."""
    return f"(o_lin * {math.prod(heavy.shape[d] for d in dims)}LL)"


def _chain_source(n: Node) -> Node | None:
    """The argument of a pointwise step that carries the chain: the one shaped like the step (a
    broadcast operand is smaller), the first where both are."""
    nodes = [a for a in n.args if isinstance(a, Node)]
    full = [a for a in nodes if tuple(a.shape) == tuple(n.shape)]
    return (full or nodes or [None])[0]


def find_summed(g: OpGraph, kind: str, over) -> tuple[Node, Node, list] | None:
    """(heavy, sum, scalings between) where a sum over the dims `over(heavy)` reads a node of `kind` through
    scalings alone, each of them (and the heavy node) read by nothing else: the sum commutes with them."""
    if not any(r.kind == "reduce" and r.op == "sum" for r in g.nodes) or not any(n.kind == kind for n in g.nodes):
        return None  # asked at every level of a program's planning: most graphs have no such pair
    readers: dict[int, list[Node]] = {}
    for n in g.nodes:
        for a in {id(a): a for a in _flat(n.args) if isinstance(a, Node)}.values():
            readers.setdefault(id(a), []).append(n)
    for r in g.nodes:
        if r.kind != "reduce" or r.op != "sum":
            continue
        chain, src = [], r.args[0]
        while isinstance(src, Node) and src.kind == "pw" and len(readers.get(id(src), [])) == 1 and \
                (prev := _chain_source(src)) is not None and _affine(src, prev):
            chain.insert(0, src)
            src = prev
        if isinstance(src, Node) and src.kind == kind and len(readers.get(id(src), [])) == 1 \
                and tuple(r.dims) == tuple(over(src)) \
                and all(_leaf_computed(g, c, src) for c in tensor_operands(chain, src)):
            return src, r, chain
    return None


def summed_alone(g: OpGraph, found: tuple[Node, Node, list] | None, missing: str, what: str) -> tuple[Node, Node, list]:
    """`found` (a `find_summed` result) when the graph is that heavy node, its sum and pointwise ops after the
    sum read element by element; `missing`: the reason when nothing was found, `what`: the sum's name."""
    if found is None:
        raise Unsupported(missing)
    heavy, r, _ = found
    if [n for n in g.nodes if n.kind not in ("input", "param", "pw") and n is not heavy and n is not r]:
        raise Unsupported(f"more than a {what} and pointwise ops after it")
    check_elementwise_after(g, [r], what)
    return found
