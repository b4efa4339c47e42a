"""A heavy node (conv, matmul) whose output is only summed, never kept: the search both `conv_sum` and
`gemm_sum` plan from. Between the heavy node and the sum only scalings by constants may lie (the sum
commutes with them), each read by nothing else."""
from __future__ import annotations

from agents.expert.opgraph import Node, OpGraph, Unsupported, _flat, check_elementwise_after

LINEAR = ("mul", "div", "neg")  # scalings a sum commutes with


def _scaling(n: Node, src: Node) -> bool:
    if n.kind != "pw" or n.op not in LINEAR or n.args[0] is not src:
        return False
    return n.op == "neg" or (len(n.args) == 2 and isinstance(n.args[1], (int, float)) and not isinstance(n.args[1], bool))


def find_summed(g: OpGraph, kind: str, over) -> tuple[Node, Node, list] | None:
    """(heavy, sum, scalings between) where a sum over the dims `over(heavy)` reads a node of `kind` through
    scalings alone, each of them (and the heavy node) read by nothing else: the sum commutes with them."""
    readers: dict[int, list[Node]] = {}
    for n in g.nodes:
        for a in {id(a): a for a in _flat(n.args) if isinstance(a, Node)}.values():
            readers.setdefault(id(a), []).append(n)
    for r in g.nodes:
        if r.kind != "reduce" or r.op != "sum":
            continue
        chain, src = [], r.args[0]
        while isinstance(src, Node) and src.kind == "pw" and len(readers.get(id(src), [])) == 1 and \
                src.args and isinstance(src.args[0], Node) and _scaling(src, src.args[0]):
            chain.insert(0, src)
            src = src.args[0]
        if isinstance(src, Node) and src.kind == kind and len(readers.get(id(src), [])) == 1 \
                and tuple(r.dims) == tuple(over(src)):
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
