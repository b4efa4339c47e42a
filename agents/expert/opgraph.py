"""Read a reference with torch.export (on meta tensors: no compute) into a small op graph,
lowering semantic ops (softmax, layer_norm, mean, var, batch_norm, ...) into primitive
pointwise and reduction nodes that the templates know how to emit."""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch


class Unsupported(Exception):
    """The expert does not cover this task; the message names the op."""


@dataclass
class Node:
    name: str
    kind: str  # "input" (user input), "param", "pw" (pointwise), "reduce", "gemm"
    op: str = ""
    args: list = field(default_factory=list)  # Node, float/int/bool/None, or lists
    shape: tuple = ()
    dtype: str = "float32"
    index: int = -1  # user-input position, or parameter order
    target: str = ""  # parameter FQN for params
    dims: tuple = ()  # reduce: reduced dims (positive)
    keepdim: bool = False

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass
class OpGraph:
    nodes: list[Node]
    inputs: list[Node]
    params: list[Node]
    output: Node
    aten_ops: list[str]

    def consumers(self, n: Node) -> list[Node]:
        return [m for m in self.nodes if any(a is n for a in _flat(m.args))]


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


POINTWISE = {
    "relu", "leaky_relu", "gelu", "selu", "elu", "celu", "softplus", "hardtanh", "hardsigmoid", "hardswish",
    "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "sin", "cos", "erf", "log1p", "expm1",
    "reciprocal", "mish", "clamp", "clamp_min", "clamp_max", "pow", "add", "sub", "mul", "div", "rsub",
    "maximum", "minimum", "threshold", "log_sigmoid", "square", "relu6", "sign", "exp2", "log2", "floor", "ceil",
    "round", "trunc", "frac", "tan", "atan", "sinh", "cosh", "asinh", "logit", "hardshrink", "softshrink",
    "tanhshrink",
}
IDENTITY = {"clone", "contiguous", "alias", "detach", "dropout", "lift_fresh_copy", "feature_dropout", "identity"}
VIEWS = {"view", "reshape", "_unsafe_view", "flatten", "squeeze", "unsqueeze", "expand"}
REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "var", "std",
          "linalg_vector_norm", "norm", "logsumexp"}
NORMS = {"softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm", "rms_norm", "batch_norm",
         "_native_batch_norm_legit_no_training", "instance_norm"}
GEMM = {"linear", "mm", "bmm", "matmul", "addmm"}


def _dt(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def export_graph(task) -> OpGraph:
    try:
        ep = torch.export.export(task.make_model(42).eval().to("meta"), tuple(task.make_inputs(1, "meta")))
    except Exception:
        try:
            ep = torch.export.export(task.make_model(42).eval(), tuple(task.make_inputs(1)))
        except Exception as exc:
            raise Unsupported(f"torch.export could not trace the reference ({type(exc).__name__}: {str(exc)[:120]})") from None
    sig = ep.graph_signature
    to_param = {**getattr(sig, "inputs_to_parameters", {}), **getattr(sig, "inputs_to_buffers", {})}
    env: dict[str, object] = {}
    nodes: list[Node] = []
    user_inputs: list[Node] = []
    params: list[Node] = []
    aten_ops: list[str] = []
    out_node = None
    tuple_vals: dict[str, list] = {}

    def val(a):
        if isinstance(a, torch.fx.Node):
            if a.name not in env:
                raise Unsupported(f"unsupported value {a.name}")
            return env[a.name]
        if isinstance(a, (list, tuple)):
            return [val(x) for x in a]
        if isinstance(a, torch.dtype):
            return str(a).removeprefix("torch.")
        return a

    for fx in ep.graph.nodes:
        meta = fx.meta.get("val")
        if fx.op == "placeholder":
            if fx.name in to_param:
                n = Node(fx.name, "param", shape=tuple(meta.shape), dtype=_dt(meta), index=len(params),
                         target=to_param[fx.name])
                params.append(n)
            else:
                if not isinstance(meta, torch.Tensor):
                    env[fx.name] = meta  # a scalar input: baked in would be wrong; refuse below if used
                    raise Unsupported("scalar (non-tensor) inputs to forward")
                n = Node(fx.name, "input", shape=tuple(meta.shape), dtype=_dt(meta), index=len(user_inputs))
                user_inputs.append(n)
            env[fx.name] = n
            nodes.append(n)
            continue
        if fx.op == "output":
            outs = fx.args[0]
            if len(outs) != 1:
                raise Unsupported(f"{len(outs)} outputs (the expert emits single-output kernels)")
            out_node = val(outs[0])
            continue
        if fx.op != "call_function":
            raise Unsupported(f"graph node {fx.op}")
        if fx.target is operator.getitem:
            src, i = fx.args
            tv = tuple_vals.get(src.name)
            if tv is None:
                raise Unsupported(f"getitem on {src.name}")
            env[fx.name] = tv[i]
            continue
        name = fx.target._overloadpacket.__name__ if hasattr(fx.target, "_overloadpacket") else str(fx.target)
        aten_ops.append(f"aten::{name}")
        args = [val(a) for a in fx.args]
        kwargs = {k: val(v) for k, v in fx.kwargs.items()}
        try:
            res = _lower(name, fx, args, kwargs, meta, nodes)
        except Unsupported:
            raise
        except Exception as exc:  # a form of the op the lowering does not know: say which, never crash the run
            raise Unsupported(f"aten::{name} in a form the expert cannot lower ({type(exc).__name__}: {str(exc)[:80]})") from None
        if isinstance(res, list):
            tuple_vals[fx.name] = res
        else:
            env[fx.name] = res
    if out_node is None or not isinstance(out_node, Node):
        raise Unsupported("the reference returns no tensor")
    live = _reachable(out_node)  # e.g. the unused indices of max.dim
    nodes = [n for n in nodes if n.name in live or n.kind == "input"]
    params = [p for p in params if p.name in live]
    for i, p in enumerate(params):
        p.index = i
    return OpGraph(nodes=nodes, inputs=user_inputs, params=params, output=out_node, aten_ops=aten_ops)


def _reachable(out: Node) -> set[str]:
    seen, stack = set(), [out]
    while stack:
        n = stack.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        stack += [a for a in _flat(n.args) if isinstance(a, Node)]
    return seen


class _B:
    """Builder of lowered nodes."""
    counter = 0

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes

    def add(self, kind, op, args, shape, dtype, **kw) -> Node:
        _B.counter += 1
        n = Node(f"{op}_{_B.counter}", kind, op, list(args), tuple(shape), dtype, **kw)
        self.nodes.append(n)
        return n


def _dims(d, rank):
    if d is None or d == []:
        return tuple(range(rank))
    if isinstance(d, int):
        d = [d]
    return tuple(sorted(x % rank for x in d))


def _rshape(shape, dims, keepdim):
    return tuple((1 if i in dims else s) for i, s in enumerate(shape) if keepdim or i not in dims)


def _lower(name, fx, args, kwargs, meta, nodes) -> Node | list:
    b = _B(nodes)
    shape = tuple(meta.shape) if isinstance(meta, torch.Tensor) else ()
    dtype = _dt(meta) if isinstance(meta, torch.Tensor) else "float32"
    x = args[0] if args else None
    if name in IDENTITY:
        return x
    if name in VIEWS:
        if math.prod(shape) != math.prod(x.shape):
            raise Unsupported(f"aten::{name} that changes the element count")
        return b.add("pw", "view", [x], shape, dtype)
    if name == "relu6":
        name, args = "hardtanh", [x, 0.0, 6.0]
    if name in POINTWISE:
        return b.add("pw", name, args + [kwargs.get(k) for k in ("alpha", "approximate") if k in kwargs], shape, dtype)
    if name in ("to", "_to_copy", "type_as"):
        return b.add("pw", "cast", [x], shape, dtype)
    if name in GEMM:
        if name == "addmm":
            bias, m1, m2 = args[:3]
            g = b.add("gemm", "mm", [m1, m2, None], shape, dtype)
            return b.add("pw", "add", [g, bias], shape, dtype)
        if name == "linear":
            return b.add("gemm", "linear", [args[0], args[1], args[2] if len(args) > 2 else None], shape, dtype)
        a, w = args[:2]
        if len(a.shape) not in (2, 3) or len(w.shape) not in (2, 3):
            raise Unsupported(f"aten::{name} with {len(a.shape)}-d and {len(w.shape)}-d operands")
        return b.add("gemm", "bmm" if len(shape) == 3 else "mm", [a, w, None], shape, dtype)
    rank = len(x.shape) if isinstance(x, Node) else 0

    def red(op, src, dims, keepdim, out_dtype="float32"):
        return b.add("reduce", op, [src], _rshape(src.shape, dims, keepdim), out_dtype, dims=dims, keepdim=keepdim)

    def const_count(dims, src):
        return float(math.prod(src.shape[d] for d in dims))

    if name in ("sum", "mean", "amax", "amin", "prod", "logsumexp"):
        dims = _dims(args[1] if len(args) > 1 else kwargs.get("dim"), rank)
        keep = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        if name == "mean":
            s = red("sum", x, dims, keep, dtype)
            return b.add("pw", "div", [s, const_count(dims, x)], s.shape, dtype)
        if name == "logsumexp":
            m = red("amax", x, dims, True, dtype)
            e = b.add("pw", "exp", [b.add("pw", "sub", [x, m], x.shape, dtype)], x.shape, dtype)
            s = red("sum", e, dims, keep, dtype)
            mk = m if keep else b.add("pw", "view", [m], s.shape, dtype)
            return b.add("pw", "add", [b.add("pw", "log", [s], s.shape, dtype), mk], s.shape, dtype)
        return red(name, x, dims, keep, dtype)
    if name in ("max", "min") and len(args) > 1 and isinstance(args[1], Node):  # torch.min(x, other): elementwise
        return b.add("pw", "maximum" if name == "max" else "minimum", args[:2], shape, dtype)
    if name in ("max", "min") and len(args) == 1:
        return red("a" + name, x, tuple(range(rank)), False, dtype)
    if name in ("max", "min"):
        dims, keep = _dims(args[1], rank), bool(args[2] if len(args) > 2 else False)
        return [red("a" + name, x, dims, keep, dtype), red("arg" + name, x, dims, keep, "int64")]
    if name in ("argmax", "argmin"):
        if len(args) < 2 or args[1] is None:
            raise Unsupported(f"aten::{name} over the whole tensor")
        return red(name, x, _dims(args[1], rank), bool(args[2] if len(args) > 2 else False), "int64")
    if name in ("var", "std"):
        dims = _dims(args[1] if len(args) > 1 else kwargs.get("dim"), rank)
        corr = kwargs.get("correction", 1 if kwargs.get("unbiased", True) else 0)
        keep = bool(kwargs.get("keepdim", False))
        n = const_count(dims, x)
        mean = b.add("pw", "div", [red("sum", x, dims, True, dtype), n], _rshape(x.shape, dims, True), dtype)
        d = b.add("pw", "sub", [x, mean], x.shape, dtype)
        ss = red("sum", b.add("pw", "mul", [d, d], x.shape, dtype), dims, keep, dtype)
        v = b.add("pw", "div", [ss, max(n - (corr or 0), 1.0)], ss.shape, dtype)
        return b.add("pw", "sqrt", [v], v.shape, dtype) if name == "std" else v
    if name in ("linalg_vector_norm", "norm"):
        ordv = args[1] if len(args) > 1 else kwargs.get("ord", 2)
        dims = _dims(args[2] if len(args) > 2 else kwargs.get("dim"), rank)
        keep = bool(args[3] if len(args) > 3 else kwargs.get("keepdim", False))
        if ordv in (2, 2.0):
            s = red("sum", b.add("pw", "mul", [x, x], x.shape, dtype), dims, keep, dtype)
            return b.add("pw", "sqrt", [s], s.shape, dtype)
        if ordv in (1, 1.0):
            return red("sum", b.add("pw", "abs", [x], x.shape, dtype), dims, keep, dtype)
        raise Unsupported(f"aten::{name} with ord={ordv}")
    if name in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
        dims = _dims(args[1], rank)
        m = red("amax", x, dims, True, dtype)
        sh = b.add("pw", "sub", [x, m], x.shape, dtype)
        s = red("sum", b.add("pw", "exp", [sh], x.shape, dtype), dims, True, dtype)
        if "log" in name:
            return b.add("pw", "sub", [sh, b.add("pw", "log", [s], s.shape, dtype)], x.shape, dtype)
        return b.add("pw", "div", [b.add("pw", "exp", [sh], x.shape, dtype), s], x.shape, dtype)
    if name in ("layer_norm", "rms_norm"):
        k = len(args[1])
        dims = tuple(range(rank - k, rank))
        w = args[2] if len(args) > 2 else None
        if name == "layer_norm":
            bias = args[3] if len(args) > 3 else None
            eps = args[4] if len(args) > 4 else 1e-5
        else:
            bias, eps = None, args[3] if len(args) > 3 and args[3] is not None else 1.1920928955078125e-07
        n = const_count(dims, x)
        rs = _rshape(x.shape, dims, True)
        if name == "layer_norm":
            mean = b.add("pw", "div", [red("sum", x, dims, True, dtype), n], rs, dtype)
            xc = b.add("pw", "sub", [x, mean], x.shape, dtype)
        else:
            xc = x
        var = b.add("pw", "div", [red("sum", b.add("pw", "mul", [xc, xc], x.shape, dtype), dims, True, dtype), n], rs, dtype)
        inv = b.add("pw", "rsqrt", [b.add("pw", "add", [var, float(eps)], rs, dtype)], rs, dtype)
        y = b.add("pw", "mul", [xc, inv], x.shape, dtype)
        if w is not None:
            y = b.add("pw", "mul", [y, w], x.shape, dtype)
        if bias is not None:
            y = b.add("pw", "add", [y, bias], x.shape, dtype)
        return y
    if name in ("batch_norm", "_native_batch_norm_legit_no_training"):
        if name == "batch_norm":
            _, w, bias, rm, rv, training, _mom, eps = args[:8]
            if training:
                raise Unsupported("aten::batch_norm in training mode")
        else:
            _, w, bias, rm, rv, _mom, eps = args[:7]
        cs = (1, x.shape[1]) + (1,) * (rank - 2)

        def chan(t):
            return b.add("pw", "view", [t], cs, dtype)
        inv = b.add("pw", "rsqrt", [b.add("pw", "add", [chan(rv), float(eps)], cs, dtype)], cs, dtype)
        y = b.add("pw", "mul", [b.add("pw", "sub", [x, chan(rm)], x.shape, dtype), inv], x.shape, dtype)
        if w is not None:
            y = b.add("pw", "mul", [y, chan(w)], x.shape, dtype)
        if bias is not None:
            y = b.add("pw", "add", [y, chan(bias)], x.shape, dtype)
        return [y, y, y] if name != "batch_norm" else y
    raise Unsupported(f"aten::{name}")
