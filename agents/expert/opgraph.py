"""Read a reference with torch.export (on meta tensors: no compute) into a small op graph,
lowering semantic ops (softmax, layer_norm, mean, var, batch_norm, ...) into primitive
pointwise and reduction nodes that the templates know how to emit."""
from __future__ import annotations

import math
import operator
import warnings
from dataclasses import dataclass, field

import torch

from state import DRAW_OPS
from tasks import tensor_attribute


class Unsupported(Exception):
    """The expert does not cover this task; the message names the op."""


@dataclass
class Node:
    name: str
    kind: str  # "input" (user input), "param", "pw" (pointwise), "reduce", "gemm", "conv", "pool", "scan"
    op: str = ""
    args: list = field(default_factory=list)  # Node, float/int/bool/None, or lists
    shape: tuple = ()
    dtype: str = "float32"
    index: int = -1  # user-input position, or parameter order
    target: str = ""  # parameter FQN for params
    dims: tuple = ()  # reduce: reduced dims (positive); scan and flip: the dim
    keepdim: bool = False
    reverse: bool = False  # scan: from the end of the dim towards its start
    attrs: dict = field(default_factory=dict)  # pool: kernel, stride, padding, dilation, count_include_pad, divisor; conv: stride, padding, dilation, groups

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass
class OpGraph:
    nodes: list[Node]
    inputs: list[Node]
    params: list[Node]
    output: Node
    aten_ops: list[str]
    # forward's non-tensor inputs, (position, value): torch.export specialises them into the graph, so
    # the kernel is specialised to the value, as it is to the shapes (the host code checks both)
    scalars: list = field(default_factory=list)

    def structure(self) -> tuple:
        """The graph up to node names (which come from a process-wide counter): two graphs with equal
        structures plan alike. A program's planner remembers the rests it failed on by it."""
        pos = {id(n): i for i, n in enumerate(self.nodes)}

        def enc(a):
            if isinstance(a, (list, tuple)):
                return (type(a).__name__, tuple(enc(x) for x in a))
            if isinstance(a, Node):
                return ("node", pos.get(id(a), a.name))
            return repr(a)
        return (tuple((n.kind, n.op, tuple(n.shape), n.dtype, n.index, n.target, tuple(n.dims), n.keepdim, n.reverse,
                       repr(sorted(n.attrs.items())), enc(n.args)) for n in self.nodes),
                enc(self.inputs), enc(self.params), enc(self.output), repr(self.scalars))

    def consumers(self, n: Node) -> list[Node]:
        return [m for m in self.nodes if any(a is n for a in _flat(m.args))]

    def readers(self) -> dict[int, list[Node]]:
        return readers_of(self.nodes)


def readers_of(nodes: list[Node]) -> dict[int, list[Node]]:
    """Each node's readers (by the node's id), each listed once, in one pass over the nodes."""
    out: dict[int, list[Node]] = {}
    for n in nodes:
        for a in {id(a): a for a in _flat(n.args) if isinstance(a, Node)}.values():
            out.setdefault(id(a), []).append(n)
    return out


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def ancestors(n: Node) -> set[int]:
    """The ids of n and every node it is computed from."""
    seen, stack = set(), [n]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack += [a for a in _flat(x.args) if isinstance(a, Node)]
    return seen


def unview(n):
    """The tensor under a chain of views (a view of a view is a view of the base); `n` itself otherwise."""
    while isinstance(n, Node) and n.kind == "pw" and n.op == "view":
        n = n.args[0]
    return n


POINTWISE = {
    "relu", "leaky_relu", "gelu", "selu", "elu", "celu", "softplus", "hardtanh", "hardsigmoid", "hardswish",
    "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "sin", "cos", "erf", "log1p", "expm1",
    "reciprocal", "mish", "clamp", "clamp_min", "clamp_max", "pow", "add", "sub", "mul", "div", "rsub",
    "maximum", "minimum", "threshold", "log_sigmoid", "square", "relu6", "sign", "exp2", "log2", "floor", "ceil",
    "round", "trunc", "frac", "tan", "atan", "sinh", "cosh", "asinh", "logit", "hardshrink", "softshrink",
    "tanhshrink", "eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill",
}
IDENTITY = {"clone", "contiguous", "alias", "detach", "detach_", "dropout", "lift_fresh_copy", "feature_dropout",
            "identity"}
ALIASES = {"multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div"}  # torch's long names
VIEWS = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze", "expand", "view_as", "reshape_as",
         "expand_as"}
SCAN = {"cumsum", "cumprod"}
REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "var", "std",
          "linalg_vector_norm", "norm", "logsumexp"}
NORMS = {"softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm", "rms_norm", "batch_norm",
         "_native_batch_norm_legit_no_training", "instance_norm"}
GEMM = {"linear", "mm", "bmm", "matmul", "addmm"}


def _dt(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def export_graph(task) -> OpGraph:
    with warnings.catch_warnings():  # nn.LSTM's flattened weights: torch warns on every export of one
        warnings.filterwarnings("ignore", message="The tensor attributes .*_flat_weights")
        return _export_graph(task)


def _export(model, inputs):
    from agents.expert.rnn_export import opaque_recurrences
    with opaque_recurrences():  # an RNN module one node, not its steps traced (rnn_export.py)
        return torch.export.export(model, inputs)


def _export_graph(task) -> OpGraph:
    try:
        with torch.device("meta"):  # no weights allocated, whatever their size
            model = task.make_model(42)  # in the mode its file leaves it, as KernelBench's harness runs it
        ep = _export(model, tuple(task.make_inputs(1, "meta")))
    except Exception:
        try:
            model = task.make_model(42)
            ep = _export(model, tuple(task.make_inputs(1)))
        except Exception as exc:
            raise Unsupported(f"torch.export could not trace the reference ({type(exc).__name__}: {str(exc)[:120]})") from None
    sig = ep.graph_signature
    consts = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
    attrs = {c for c in consts.values() if tensor_attribute(model, c) is not None}
    if any(ep.constants[c].is_meta for c in consts.values() if c not in attrs):
        # a tensor made inside forward on the input's device (`torch.tensor(v, device=x.device)`) has no
        # value on meta: trace again on real inputs, where they are not too large to make on the CPU
        if sum(math.prod(x.shape) for x in task.make_inputs(1, "meta")) > 2 ** 28:
            raise Unsupported("a tensor constant made inside forward, on inputs too large to trace on the CPU")
        model = task.make_model(42)
        ep = _export(model, tuple(task.make_inputs(1)))
        sig = ep.graph_signature
        consts = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
        attrs = {c for c in consts.values() if tensor_attribute(model, c) is not None}
    to_param = {**getattr(sig, "inputs_to_parameters", {}), **getattr(sig, "inputs_to_buffers", {})}
    env: dict[str, object] = {}
    nodes: list[Node] = []
    user_inputs: list[Node] = []
    scalars: list = []
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
            if fx.name in consts and consts[fx.name] in attrs:  # a tensor attribute: an input of the program,
                # copied from the reference at build like a buffer (PARAM_MAP names it)
                c = ep.constants[consts[fx.name]]
                n = Node(fx.name, "param", shape=tuple(c.shape), dtype=_dt(c), index=len(params), target=consts[fx.name])
                params.append(n)
                env[fx.name] = n
                nodes.append(n)
                continue
            if fx.name in consts:  # a constant made inside forward: a one-element one is a number in the kernel
                c = ep.constants[consts[fx.name]]
                if c.numel() != 1:
                    raise Unsupported(f"a tensor constant of shape {tuple(c.shape)} made inside forward")
                env[fx.name] = c.item()
                continue
            if fx.name in to_param:
                n = Node(fx.name, "param", shape=tuple(meta.shape), dtype=_dt(meta), index=len(params),
                         target=to_param[fx.name])
                params.append(n)
            else:
                position = len(user_inputs) + len(scalars)
                if not isinstance(meta, torch.Tensor):
                    if not isinstance(meta, (int, float, bool)):
                        raise Unsupported(f"a non-tensor input of type {type(meta).__name__} to forward")
                    env[fx.name] = meta
                    scalars.append((position, meta))
                    continue
                n = Node(fx.name, "input", shape=tuple(meta.shape), dtype=_dt(meta), index=position)
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
        # an in-place variant (relu_, add_, mul_): its value, and the tensor it mutated reads it from here on
        inplace = name.endswith("_") and name not in LOWER and name[:-1] in LOWER and fx.args \
            and isinstance(fx.args[0], torch.fx.Node)
        try:
            res = _lower(name[:-1] if inplace else name, fx, args, kwargs, meta, nodes)
            if inplace:
                env[fx.args[0].name] = res
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
    if out_node.dtype == "bool":
        raise Unsupported("a boolean output (comparisons are lowered inside an expression only)")
    live = _reachable(out_node)  # e.g. the unused indices of max.dim
    nodes = _pool_first(_merge_cell_twins([n for n in nodes if n.name in live or n.kind == "input"]))
    # the draws, in the order the reference makes them (each kept, read or not: the replay hands them out in order),
    # after the user's inputs, at positions past every forward argument (the host code draws them itself)
    for i, n in enumerate(d for d in nodes if is_draw(d)):
        n.index, n.name = DRAW_INDEX + i, f"draw{i}"  # (a name of its order: the generated code must not vary by run)
        user_inputs.append(n)
    params = [p for p in params if p.name in live]
    for i, p in enumerate(params):
        p.index = i
    return OpGraph(nodes=nodes, inputs=user_inputs, params=params, output=out_node, aten_ops=aten_ops, scalars=scalars)


def _merge_cell_twins(nodes: list[Node]) -> list[Node]:
    """An LSTM layer whose h steps and cell-state twin (_recurrent's emit "c", c_n's source) are both read becomes one
    recurrence writing both (emit "hc": h's steps, then c's, one buffer), the two read through slices of it: the
    recurrence walks once, not twice (level 3 task 37, LSTMCn: 11 recurrences for 6 layers, 0.72x eager)."""
    twins = [n for n in nodes if n.kind == "rnn" and n.attrs.get("emit") == "c"]
    for c in twins:
        rest = {k: v for k, v in c.attrs.items() if k != "emit"}
        h = next((n for n in nodes if n.kind == "rnn" and "emit" not in n.attrs and n.attrs == rest and n.op == c.op
                  and len(n.args) == len(c.args) and all(a is b for a, b in zip(n.args, c.args))), None)
        if h is None:
            continue
        _B.counter += 1
        hc = Node(f"{h.op}_hc_{_B.counter}", "rnn", h.op, list(h.args), (2, *h.shape), h.dtype,
                  attrs={**rest, "emit": "hc"})
        halves = [Node(f"{hc.name}_{i}", "pw", "narrow", [hc, 0, i], (1, *h.shape), h.dtype) for i in range(2)]
        for n, half in zip((h, c), halves):  # each keeps its identity (its readers hold it): a view of its half
            n.kind, n.op, n.args, n.attrs = "pw", "view", [half], {}
        at = min(nodes.index(h), nodes.index(c))
        nodes[at:at] = [hc, *halves]
    return nodes


def _pool_first(nodes: list[Node]) -> list[Node]:
    """An average pool of a 1x1 conv's output (DenseNet's transition: BatchNorm, ReLU, conv 1x1, 2x2 average pool)
    is the conv of the pooled input: both are linear, the pool the same map on every channel (without padding or a
    divisor override its weights sum to 1, so the bias passes through) and the conv the same mix at every pixel.
    Pooled first, the conv runs on a quarter of the pixels and the pool reads the conv's input where that moves no
    more bytes (pooled pixels x input channels at most the pixels x output channels; level 3 task 13: 1.34 ms of
    conv and 0.93 of pool at 127783d). Each node keeps its identity (its readers hold it): the conv's becomes the
    pool of its input, the pool's the conv of that."""
    readers = readers_of(nodes)
    for pool in nodes:
        a = pool.attrs
        cv = pool.args[0] if pool.kind == "pool" and a.get("kind") == "avg" else None
        if (cv is None or cv.kind != "conv" or len(readers.get(id(cv), [])) != 1 or cv.attrs.get("transposed")
                or any(a["padding"]) or a["divisor"] or len(a["kernel"]) > len(cv.shape) - 2):
            continue
        x, w, b = cv.args
        if any(k != 1 for k in w.shape[2:]) or any(s != 1 for s in cv.attrs["stride"]) or any(cv.attrs["padding"]):
            continue
        if math.prod(pool.shape[2:]) * x.shape[1] > math.prod(cv.shape[2:]) * cv.shape[1]:
            continue  # (pooling the input would move more bytes than pooling the output)
        conv_op, conv_attrs = cv.op, cv.attrs
        cv.kind, cv.op, cv.args, cv.shape, cv.attrs = "pool", pool.op, [x], (*pool.shape[:1], x.shape[1], *pool.shape[2:]), a
        pool.kind, pool.op, pool.args, pool.attrs = "conv", conv_op, [cv, w, b], conv_attrs
    return nodes


DRAW_INDEX = 1000  # a draw leaf's `index` (its host name x1000, ...): no forward argument's position


def is_draw(n: Node) -> bool:
    return n.kind == "input" and bool(n.attrs.get("draw"))


# index-mapped views: element i reads another index
REMAPS = {"narrow", "pad", "cat", "permute", "transpose2d", "gather_row", "unfold", "roll", "take_rows", "repeat"}


def check_elementwise_after(g: OpGraph, heavy: list, what: str) -> None:
    """A template that hands its result to the epilogue element by element (a GEMM or conv
    accumulator, a scan's running value, a row's reductions) cannot have a slice, concatenation or
    permutation between that result and the output: the epilogue would read another element's index."""
    targets = {id(h) for h in heavy}
    stack, seen = [(g.output, False)], set()
    while stack:
        n, remapped = stack.pop()
        if (id(n), remapped) in seen or not isinstance(n, Node):
            continue
        seen.add((id(n), remapped))
        if id(n) in targets:
            if remapped:
                raise Unsupported(f"a slice, concatenation or permutation of a {what}'s result")
            continue
        r = remapped or (n.kind == "pw" and n.op in REMAPS)
        stack += [(a, r) for a in _flat(n.args) if isinstance(a, Node)]


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


def dim_runs(dims) -> list[tuple]:
    """Sorted dims as runs of adjacent ones: (0, 2, 3) -> [(0,), (2, 3)]."""
    runs: list[list[int]] = []
    for d in sorted(dims):
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return [tuple(r) for r in runs]


SEGMENTED_ROW_MAX = 48 * 1024  # elements of a segmented row (192 KB of fp32 in one block's shared memory)


def block_holds_segmented(R: int) -> bool:
    """A segmented row of R elements is short enough for one block to cache (else the grid-level template
    splits it over blocks). The one place the cap is read, so lowering it (tests) moves every decision."""
    return R <= SEGMENTED_ROW_MAX


def segmented_row(shape, runs, any_length: bool = False) -> bool:
    """Dims reduced as one row of segments: a leading run from dim 0 and a trailing run to the last dim
    (BatchNorm's (0, 2, 3)), the row short enough to be cached by a block (or `any_length`: a longer one
    is split over blocks by the grid-level template)."""
    return (len(runs) == 2 and runs[0][0] == 0 and runs[1][-1] == len(shape) - 1
            and (any_length or block_holds_segmented(math.prod(shape[d] for r in runs for d in r))))


def _rshape(shape, dims, keepdim):
    return tuple((1 if i in dims else s) for i, s in enumerate(shape) if keepdim or i not in dims)


@dataclass
class _Op:
    """One aten call being lowered: its name, evaluated arguments and output metadata."""
    name: str
    args: list
    kwargs: dict
    shape: tuple
    dtype: str
    b: _B

    @property
    def x(self):
        return self.args[0] if self.args else None

    @property
    def rank(self) -> int:
        return len(self.x.shape) if isinstance(self.x, Node) else 0

    def arg(self, i: int, key: str | None = None, default=None):
        if len(self.args) > i:
            return self.args[i]
        return self.kwargs.get(key, default) if key else default

    def dim(self, i: int, key: str = "dim") -> int:
        d = self.arg(i, key)
        d = d[0] if isinstance(d, (list, tuple)) and len(d) == 1 else d
        if not isinstance(d, int):
            raise Unsupported(f"aten::{self.name} over dims {d}")
        return d % self.rank

    def red(self, op, src, dims, keepdim, out_dtype="float32") -> Node:
        shape = _rshape(src.shape, dims, keepdim)
        if op in ("sum", "amax", "amin", "prod") and all(src.shape[d] == 1 for d in dims):
            return self.b.add("pw", "view", [src], shape, out_dtype)  # over one element: the value itself
        runs = dim_runs(dims)
        if len(runs) == 2 and math.prod(src.shape[runs[0][-1] + 1: runs[1][0]]) == 1:  # only size-1 dims between
            cur = self.red(op, src, tuple(range(runs[0][0], runs[1][-1] + 1)), True, out_dtype)
            return cur if tuple(cur.shape) == shape else self.b.add("pw", "view", [cur], shape, out_dtype)
        if op in ("sum", "amax", "amin", "prod") and segmented_row(src.shape, runs, any_length=op != "prod"):
            # a BatchNorm's channel: the leading and the trailing dims, one row of segments. Short enough for
            # one block to hold in shared memory (templates/rowwise.py): its statistics and the normalize in
            # one kernel where the split below takes four kernels and a pointwise one; longer, split over
            # blocks (templates/gridreduce.py): the statistics in one read of the input, not two
            return self.b.add("reduce", op, [src], shape, out_dtype, dims=tuple(sorted(dims)), keepdim=keepdim)
        if op in ("sum", "amax", "amin", "prod") and len(runs) > 1:
            # over non-adjacent dims (a BatchNorm's (0, 2, 3)): over each run of adjacent dims in turn, the
            # last first, each a reduction the row families have
            cur = src
            for run in reversed(runs):
                cur = self.red(op, cur, run, True, out_dtype)
            return cur if keepdim else self.b.add("pw", "view", [cur], shape, out_dtype)
        return self.b.add("reduce", op, [src], shape, out_dtype, dims=dims, keepdim=keepdim)

    def pw(self, op, args, shape=None) -> Node:
        return self.b.add("pw", op, args, self.shape if shape is None else shape, self.dtype)


def _count(dims, src) -> float:
    return float(math.prod(src.shape[d] for d in dims))


LOWER: dict = {}  # aten op name -> how it becomes pointwise / reduce / gemm nodes


def lowers(*names):
    def reg(fn):
        for n in names:
            LOWER[n] = fn
        return fn
    return reg


def value_range(n) -> tuple[float, float]:
    """Bounds every non-NaN element of `n` lies within, from the clamps and min/max above it (the rest
    unbounded): enough to see a value that can only be zero."""
    if not isinstance(n, Node):
        return (float(n), float(n)) if isinstance(n, (int, float)) and not isinstance(n, bool) else (-math.inf, math.inf)
    if n.kind != "pw":
        return -math.inf, math.inf
    if n.op == "view":
        return value_range(n.args[0])
    lo, hi = value_range(n.args[0]) if n.args else (-math.inf, math.inf)

    def num(i):
        a = n.args[i] if len(n.args) > i else None
        return a if isinstance(a, (int, float)) and not isinstance(a, bool) else None
    bounds = {"clamp": (num(1), num(2)), "clamp_min": (num(1), None), "clamp_max": (None, num(1)),
              "hardtanh": (num(1) if len(n.args) > 1 else -1.0, num(2) if len(n.args) > 2 else 1.0),
              "relu": (0.0, None)}
    if n.op in ("minimum", "maximum"):  # monotonic in each operand: the bounds of the bounds
        (a, b), (c, d) = value_range(n.args[0]), value_range(n.args[1])
        f = min if n.op == "minimum" else max
        return f(a, c), f(b, d)
    if n.op not in bounds:
        return -math.inf, math.inf
    a, b = bounds[n.op]
    clip = lambda v: min(max(v, a) if a is not None else v, b) if b is not None else (max(v, a) if a is not None else v)  # noqa: E731
    return clip(lo), clip(hi)  # a clamp is monotonic: the bounds' images bound the image


@lowers(*IDENTITY)
def _identity(o: _Op):
    if o.name in ("dropout", "feature_dropout") and o.arg(2, "train", False) and (p := float(o.arg(1, "p", 0.0) or 0.0)) > 0:
        if value_range(o.x) == (0.0, 0.0):
            # x * mask / (1 - p) is x for x = 0 (and NaN) whatever the mask: no draw changes the value
            return o.x
        if p >= 1.0 or o.x.dtype not in ("float32", "float64", "float16", "bfloat16") or len(o.x.shape) < 2:
            raise Unsupported(f"aten::{o.name} in training mode with p={p} on a {o.x.dtype} {len(o.x.shape)}-d tensor")
        # a module left in training mode draws a keep mask every call: a leaf the host code asks egg.draw for (the
        # reference's own mask in the verifier's trials, runtime/draws.py); a channel's one for Dropout2d/3d
        _B.counter += 1
        shape = tuple(o.x.shape) if o.name == "dropout" else (*o.x.shape[:2], *[1] * (len(o.x.shape) - 2))
        keep = Node(f"draw_{_B.counter}", "input", shape=shape, dtype=o.x.dtype, attrs={"draw": "dropout", "p": p})
        o.b.nodes.append(keep)
        kept = o.pw("mul", [o.x, keep if shape == tuple(o.x.shape) else o.pw("broadcast", [keep], o.x.shape)], o.x.shape)
        return o.pw("mul", [kept, 1.0 / (1.0 - p)], o.x.shape)
    return o.x


@lowers(*VIEWS)
def _view(o: _Op):
    if o.name in ("expand", "expand_as") and math.prod(o.shape) != math.prod(o.x.shape):
        # a broadcast: each element reads the one it repeats (the emitter broadcasts operands to the shape)
        return o.pw("broadcast", [o.x])
    if math.prod(o.shape) != math.prod(o.x.shape):
        raise Unsupported(f"aten::{o.name} that changes the element count")
    return o.pw("view", [o.x])


@lowers(*POINTWISE, *ALIASES, "relu6")
def _pointwise(o: _Op):
    if o.name == "relu6":
        return o.pw("hardtanh", [o.x, 0.0, 6.0])
    if o.name in ("divide", "true_divide") and o.kwargs.get("rounding_mode"):
        raise Unsupported(f"aten::{o.name} with rounding_mode={o.kwargs['rounding_mode']!r}")
    return o.pw(ALIASES.get(o.name, o.name), o.args + [o.kwargs.get(k) for k in ("alpha", "approximate") if k in o.kwargs])


@lowers("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size")
def _assertion(o: _Op):
    """Checks torch.export records (a `.to(device)` leaves one): no value, nothing to compute."""
    return None


@lowers("copy_", "copy")
def _copy(o: _Op):
    """dst.copy_(src): src, cast to dst's dtype and broadcast to its shape (the mutated dst reads it on)."""
    dst, src = o.args[0], o.args[1]
    return o.b.add("pw", "cast", [src], dst.shape, dst.dtype)


@lowers("randn", "randn_like", "rand", "rand_like", "randint", "randint_like", "normal", "bernoulli", "uniform",
        "multinomial", "randperm", "native_dropout")
def _random(o: _Op):
    """A plain draw inside forward (torch.randn / rand and their `_like` forms in floating point: level 3 task 35's
    initial LSTM state) is a leaf of the graph the host code asks `egg.draw` for: in the verifier's trials the
    reference's own numbers, recorded as it ran (runtime/draws.py), else drawn afresh (a Dropout's mask too: _identity).
    Other random ops (bernoulli, integer draws) differ from run to run in ways no recorded tensor stands for: declined."""
    if o.name in DRAW_OPS and o.dtype in ("float32", "float64", "float16", "bfloat16"):
        _B.counter += 1
        n = Node(f"draw_{_B.counter}", "input", shape=o.shape, dtype=o.dtype,
                 attrs={"draw": o.name.removesuffix("_like")})
        o.b.nodes.append(n)
        return n
    raise Unsupported(f"aten::{o.name}: random numbers drawn inside forward cannot be verified against eager "
                      f"(only a plain randn or rand is replayed; draw the rest at init, as a tensor attribute or buffer)")


@lowers("repeat")
def _repeat(o: _Op):
    """x.repeat(sizes): tiles of x; each element reads its position modulo x's size per dim."""
    return o.pw("repeat", [o.x])


@lowers("logical_not", "bitwise_not")
def _not(o: _Op):
    if o.x.dtype != "bool":
        raise Unsupported(f"aten::{o.name} of a {o.x.dtype} tensor")
    return o.pw("eq", [o.x, 0.0])


@lowers("roll")
def _roll(o: _Op):
    """torch.roll over given dims: element i reads (i - shift) mod size along each, an index map."""
    shifts, dims = o.arg(1, "shifts"), o.arg(2, "dims", [])
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if not dims or len(dims) != len(shifts):
        raise Unsupported("aten::roll of the flattened tensor")
    out = o.x
    for s, d in zip(shifts, dims):
        out = o.b.add("pw", "roll", [out, d % o.rank, int(s) % o.x.shape[d % o.rank]], o.shape, o.dtype)
    return out


@lowers("index")
def _index(o: _Op):
    """x[idx] with one integer index tensor on dim 0 (a relative-position table read by an index buffer):
    each element reads the row its index names."""
    x, idx = o.x, o.args[1]
    if not (isinstance(idx, (list, tuple)) and len(idx) == 1 and isinstance(idx[0], Node)
            and idx[0].dtype in ("int64", "int32")):
        raise Unsupported("aten::index other than one integer index tensor on the first dim")
    if x.shape[0] > 1 << 24:  # the index travels through a float in the emitted expression
        raise Unsupported("aten::index into more than 2^24 rows")
    return o.pw("take_rows", [x, idx[0]])


@lowers("unfold")
def _unfold(o: _Op):
    """Tensor.unfold(dim, size, step): windows along dim as a new last dim, an index map."""
    d, size, step = o.dim(1, "dimension"), int(o.args[2]), int(o.args[3])
    return o.pw("unfold", [o.x, d, size, step])


@lowers("to", "_to_copy", "type_as")
def _cast(o: _Op):
    return o.pw("cast", [o.x])


@lowers(*GEMM)
def _gemm(o: _Op):
    b, args, shape, dtype = o.b, o.args, o.shape, o.dtype
    if o.name == "addmm":
        bias, m1, m2 = args[:3]
        g = b.add("gemm", "mm", [m1, m2, None], shape, dtype)
        return b.add("pw", "add", [g, bias], shape, dtype)
    if o.name == "linear":
        return b.add("gemm", "linear", [args[0], args[1], args[2] if len(args) > 2 else None], shape, dtype)
    a, w = args[:2]
    if len(a.shape) == len(w.shape) > 3 and a.shape[:-2] == w.shape[:-2]:  # (..., M, K) @ (..., K, N): one batch
        n = math.prod(a.shape[:-2])
        av = b.add("pw", "view", [a], (n,) + tuple(a.shape[-2:]), a.dtype)
        wv = b.add("pw", "view", [w], (n,) + tuple(w.shape[-2:]), w.dtype)
        g = b.add("gemm", "bmm", [av, wv, None], (n, a.shape[-2], w.shape[-1]), dtype)
        return b.add("pw", "view", [g], shape, dtype)
    if len(a.shape) not in (2, 3) or len(w.shape) not in (2, 3):
        raise Unsupported(f"aten::{o.name} with {len(a.shape)}-d and {len(w.shape)}-d operands")
    if len(a.shape) == 2 and len(w.shape) == 2 and w.shape[1] == 1 and w.kind in ("input", "param"):
        # a matrix-vector product is a row reduction (memory-bound: A read once, the sum over K in
        # two levels by the row or grid template) rather than a GEMM with one useful column
        wt = b.add("pw", "view", [w], (1, w.shape[0]), w.dtype)
        prod = b.add("pw", "mul", [a, wt], a.shape, dtype)
        return b.add("reduce", "sum", [prod], shape, dtype, dims=(1,), keepdim=True)
    return b.add("gemm", "bmm" if len(shape) == 3 else "mm", [a, w, None], shape, dtype)


@lowers("sum", "mean", "amax", "amin", "prod", "logsumexp")
def _reduce(o: _Op):
    x, dtype = o.x, o.dtype
    dims = _dims(o.arg(1, "dim"), o.rank)
    keep = bool(o.args[2] if len(o.args) > 2 else o.kwargs.get("keepdim", False))
    if o.name == "mean":
        s = o.red("sum", x, dims, keep, dtype)
        return o.pw("div", [s, _count(dims, x)], s.shape)
    if o.name == "logsumexp":
        m = o.red("amax", x, dims, True, dtype)
        e = o.pw("exp", [o.pw("sub", [x, m], x.shape)], x.shape)
        s = o.red("sum", e, dims, keep, dtype)
        mk = m if keep else o.pw("view", [m], s.shape)
        return o.pw("add", [o.pw("log", [s], s.shape), mk], s.shape)
    return o.red(o.name, x, dims, keep, dtype)


@lowers("max", "min")
def _max_min(o: _Op):
    x, args = o.x, o.args
    if len(args) > 1 and isinstance(args[1], (Node, float)):  # torch.min(x, other): elementwise (other may be a
        # one-element constant made inside forward, a number here; a dim is an int)
        return o.pw("maximum" if o.name == "max" else "minimum", args[:2])
    if len(args) == 1:
        return o.red("a" + o.name, x, tuple(range(o.rank)), False, o.dtype)
    dims, keep = _dims(args[1], o.rank), bool(args[2] if len(args) > 2 else False)
    return [o.red("a" + o.name, x, dims, keep, o.dtype), o.red("arg" + o.name, x, dims, keep, "int64")]


@lowers("argmax", "argmin")
def _arg_reduce(o: _Op):
    if len(o.args) < 2 or o.args[1] is None:
        raise Unsupported(f"aten::{o.name} over the whole tensor")
    return o.red(o.name, o.x, _dims(o.args[1], o.rank), bool(o.args[2] if len(o.args) > 2 else False), "int64")


@lowers("var", "std")
def _var_std(o: _Op):
    x, kw = o.x, o.kwargs
    dims = _dims(o.arg(1, "dim"), o.rank)
    a2 = o.args[2] if len(o.args) > 2 else None
    if "correction" in kw:  # var.correction: keyword-only correction (None: 1)
        corr = 1 if kw["correction"] is None else kw["correction"]
    elif isinstance(a2, bool):  # var.dim(x, dim, unbiased, keepdim): torch.var(x, 1, unbiased=False) lands here
        corr = 1 if a2 else 0
    else:
        corr = 1 if kw.get("unbiased", True) else 0
    keep = bool(kw.get("keepdim", o.args[3] if len(o.args) > 3 else False))
    n = _count(dims, x)
    mean = o.pw("div", [o.red("sum", x, dims, True, o.dtype), n], _rshape(x.shape, dims, True))
    d = o.pw("sub", [x, mean], x.shape)
    ss = o.red("sum", o.pw("mul", [d, d], x.shape), dims, keep, o.dtype)
    v = o.pw("div", [ss, max(n - (corr or 0), 1.0)], ss.shape)
    return o.pw("sqrt", [v], v.shape) if o.name == "std" else v


@lowers("linalg_vector_norm", "norm")
def _vector_norm(o: _Op):
    x = o.x
    ordv = o.arg(1, "ord", 2)
    dims = _dims(o.arg(2, "dim"), o.rank)
    keep = bool(o.arg(3, "keepdim", False))
    if ordv in (2, 2.0):
        s = o.red("sum", o.pw("mul", [x, x], x.shape), dims, keep, o.dtype)
        return o.pw("sqrt", [s], s.shape)
    if ordv in (1, 1.0):
        return o.red("sum", o.pw("abs", [x], x.shape), dims, keep, o.dtype)
    raise Unsupported(f"aten::{o.name} with ord={ordv}")


@lowers("softmax", "_softmax", "log_softmax", "_log_softmax")
def _softmax(o: _Op):
    x = o.x
    dims = _dims(o.args[1], o.rank)
    m = o.red("amax", x, dims, True, o.dtype)
    sh = o.pw("sub", [x, m], x.shape)
    s = o.red("sum", o.pw("exp", [sh], x.shape), dims, True, o.dtype)
    if "log" in o.name:
        return o.pw("sub", [sh, o.pw("log", [s], s.shape)], x.shape)
    return o.pw("div", [o.pw("exp", [sh], x.shape), s], x.shape)


@lowers("scaled_dot_product_attention")
def _sdpa(o: _Op):
    """softmax(Q K^T * scale) V as two batched GEMMs around a row softmax (a program of three kernels:
    the scores are written once, in fp32, and read twice). No mask, dropout or causal form yet."""
    q, k, v = o.args[:3]
    if o.arg(3, "attn_mask") is not None or float(o.arg(4, "dropout_p", 0.0) or 0.0) != 0.0 or o.arg(5, "is_causal", False) \
            or o.arg(7, "enable_gqa", False):
        raise Unsupported("aten::scaled_dot_product_attention with a mask, dropout, a causal mask or grouped heads")
    if not (len(q.shape) == len(k.shape) == len(v.shape) >= 3 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2]):
        raise Unsupported(f"aten::scaled_dot_product_attention of shapes {q.shape}, {k.shape}, {v.shape}")
    lead, (L, E), (S, Ev) = q.shape[:-2], q.shape[-2:], v.shape[-2:]
    n = math.prod(lead)
    scale = o.arg(6, "scale")
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    b = o.b
    qv = b.add("pw", "view", [q], (n, L, E), q.dtype)
    kt = b.add("pw", "transpose2d", [b.add("pw", "view", [k], (n, S, E), k.dtype)], (n, E, S), k.dtype)
    vv = b.add("pw", "view", [v], (n, S, Ev), v.dtype)
    sc = b.add("pw", "mul", [b.add("gemm", "bmm", [qv, kt, None], (n, L, S), q.dtype), scale], (n, L, S), q.dtype)
    m = b.add("reduce", "amax", [sc], (n, L, 1), q.dtype, dims=(2,), keepdim=True)
    sh = b.add("pw", "sub", [sc, m], (n, L, S), q.dtype)  # as _softmax lowers it: one row program
    tot = b.add("reduce", "sum", [b.add("pw", "exp", [sh], (n, L, S), q.dtype)], (n, L, 1), q.dtype, dims=(2,), keepdim=True)
    p = b.add("pw", "div", [b.add("pw", "exp", [sh], (n, L, S), q.dtype), tot], (n, L, S), q.dtype)
    out = b.add("gemm", "bmm", [p, vv, None], (n, L, Ev), q.dtype)
    return b.add("pw", "view", [out], o.shape, q.dtype)


@lowers("layer_norm", "rms_norm")
def _layer_rms_norm(o: _Op):
    x, args, rank = o.x, o.args, o.rank
    k = len(args[1])
    dims = tuple(range(rank - k, rank))
    w = args[2] if len(args) > 2 else None
    if o.name == "layer_norm":
        bias = args[3] if len(args) > 3 else None
        eps = args[4] if len(args) > 4 else 1e-5
    else:
        bias, eps = None, args[3] if len(args) > 3 and args[3] is not None else 1.1920928955078125e-07
    n = _count(dims, x)
    rs = _rshape(x.shape, dims, True)
    if o.name == "layer_norm":
        mean = o.pw("div", [o.red("sum", x, dims, True, o.dtype), n], rs)
        xc = o.pw("sub", [x, mean], x.shape)
    else:
        xc = x
    var = o.pw("div", [o.red("sum", o.pw("mul", [xc, xc], x.shape), dims, True, o.dtype), n], rs)
    inv = o.pw("rsqrt", [o.pw("add", [var, float(eps)], rs)], rs)
    y = o.pw("mul", [xc, inv], x.shape)
    if w is not None:
        y = o.pw("mul", [y, w], x.shape)
    if bias is not None:
        y = o.pw("add", [y, bias], x.shape)
    return y


@lowers("cumsum", "cumprod")
def _scan(o: _Op):
    d = o.dim(1)
    return o.b.add("scan", o.name, [o.x], o.x.shape, o.dtype, dims=(d,))


# -- slicing: index-mapped views the pointwise emitter reads through ---------------------------------------
@lowers("narrow")
def _narrow(o: _Op):
    d, start = o.dim(1), int(o.args[2])
    return o.pw("narrow", [o.x, d, start + (o.x.shape[d] if start < 0 else 0)])


@lowers("slice")
def _slice(o: _Op):
    d = o.dim(1)
    start, step = int(o.arg(2, "start", 0) or 0), int(o.arg(4, "step", 1) or 1)
    start = max(0, start + (o.x.shape[d] if start < 0 else 0))
    return o.pw("narrow", [o.x, d, start] + ([step] if step != 1 else []))  # x[..., start::step, ...]


@lowers("pad", "constant_pad_nd")
def _pad(o: _Op):
    """F.pad(x, pads, "constant", value): each dim's element p reads x at p - before (negative pads
    crop), the value outside x. Pads come in (before, after) pairs from the last dim back."""
    pads = list(o.args[1])
    mode = o.arg(2, "mode", "constant") if o.name == "pad" else "constant"
    if mode != "constant":
        raise Unsupported(f"aten::pad in {mode!r} mode")
    value = o.arg(3, "value", None) if o.name == "pad" else o.arg(2, "value", 0.0)
    before = [0] * o.rank
    for k in range(len(pads) // 2):
        before[o.rank - 1 - k] = int(pads[2 * k])
    return o.pw("pad", [o.x, before, float(value or 0.0)])


@lowers("select")
def _select(o: _Op):
    d, i = o.dim(1), int(o.args[2])
    shape = tuple(o.x.shape[:d]) + (1,) + tuple(o.x.shape[d + 1:])
    return o.pw("view", [o.b.add("pw", "narrow", [o.x, d, i + (o.x.shape[d] if i < 0 else 0)], shape, o.dtype)])


@lowers("split", "split_with_sizes", "chunk", "unbind")
def _split(o: _Op):
    """Pieces along a dim, each a slice view (the caller's getitem picks one)."""
    x = o.x
    if not isinstance(x, Node):
        raise Unsupported(f"aten::{o.name} of a non-tensor")
    d = int(o.arg(1 if o.name == "unbind" else 2, "dim", 0) or 0) % len(x.shape)
    S = x.shape[d]
    if o.name == "unbind":
        sizes = [1] * S
    elif o.name == "chunk":
        step = -(-S // int(o.args[1]))
        sizes = [min(step, S - a) for a in range(0, S, step)]
    else:
        spec = o.args[1]
        sizes = list(spec) if isinstance(spec, (list, tuple)) else [min(int(spec), S - a) for a in range(0, S, int(spec))]
    if sum(sizes) != S:
        raise Unsupported(f"aten::{o.name} into sizes {sizes} of {S}")
    out, start = [], 0
    for n in sizes:
        shape = tuple(x.shape[:d]) + (n,) + tuple(x.shape[d + 1:])
        piece = o.b.add("pw", "narrow", [x, d, start], shape, x.dtype)
        if o.name == "unbind":
            piece = o.b.add("pw", "view", [piece], tuple(x.shape[:d]) + tuple(x.shape[d + 1:]), x.dtype)
        out.append(piece)
        start += n
    return out


@lowers("zeros", "ones", "full", "new_zeros", "new_ones", "new_full")
def _full(o: _Op):
    """A constant tensor made inside forward: a value at every index, nothing read."""
    if o.name in ("full", "new_full"):
        v = float(o.args[1] if o.name == "full" else o.args[2])
    else:
        v = 0.0 if "zeros" in o.name else 1.0
    return o.b.add("pw", "full", [v], o.shape, o.dtype)


@lowers("zeros_like", "ones_like", "full_like")
def _full_like(o: _Op):
    v = 0.0 if o.name == "zeros_like" else 1.0 if o.name == "ones_like" else float(o.args[1])
    return o.pw("full", [v])


@lowers("cat", "concat", "stack")
def _cat(o: _Op):
    xs = list(o.args[0])
    if o.name == "stack":  # stack = cat of each input with a new axis of length 1 at dim
        d = int(o.arg(1, "dim", 0) or 0) % (len(xs[0].shape) + 1)
        xs = [o.b.add("pw", "view", [x], tuple(x.shape[:d]) + (1,) + tuple(x.shape[d:]), x.dtype) for x in xs]
    d = int(o.arg(1, "dim", 0) or 0) % len(xs[0].shape)  # o.dim reads the rank of args[0], a list here
    if len(xs) == 2 and (sc := _exclusive_scan(o.b, xs, d)) is not None:
        return sc
    out = xs[0]
    for x in xs[1:]:  # pairwise: cat(a, b, c) = cat(cat(a, b), c)
        shape = list(out.shape)
        shape[d] += x.shape[d]
        out = o.b.add("pw", "cat", [out, x, d], tuple(shape), o.dtype)
    return out


def _exclusive_scan(b, xs: list, d: int):
    """cat([identity of size 1 along d, scan(narrow(x, d, 0, n - 1), d)], d) is x's exclusive scan
    (KernelBench 92): one scan kernel, the prefix before each element, no shifted copy."""
    head, sc = xs
    if not (isinstance(sc, Node) and sc.kind == "scan" and sc.dims == (d,) and not sc.reverse
            and isinstance(head, Node) and head.kind == "pw" and head.op == "full" and head.shape[d] == 1
            and head.args[0] == (0.0 if sc.op == "cumsum" else 1.0)):
        return None
    nar = sc.args[0]
    if not (isinstance(nar, Node) and nar.kind == "pw" and nar.op == "narrow" and len(nar.args) == 3 and nar.args[1] == d and nar.args[2] == 0
            and nar.args[0].shape[d] == nar.shape[d] + 1):
        return None
    x = nar.args[0]
    return b.add("scan", sc.op, [x], x.shape, sc.dtype, dims=(d,), attrs={"exclusive": True})  # the inclusive one is dead


@lowers("flip")
def _flip(o: _Op):
    """Only as reverse scans are written: flip(cumsum(flip(x, d), d), d) is x scanned from the end."""
    d = o.dim(1, "dims")
    x = o.x
    if x.kind == "scan" and not x.reverse and x.dims == (d,) and x.args[0].kind == "pw" and x.args[0].op == "flip" \
            and x.args[0].dims == (d,):
        return o.b.add("scan", x.op, [x.args[0].args[0]], x.shape, x.dtype, dims=(d,), reverse=True)
    return o.b.add("pw", "flip", [x], o.shape, o.dtype, dims=(d,))  # lowered further only inside that pattern


def _per_dim(v, nd: int, default) -> list[int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    v = v * nd if len(v) == 1 else v
    if len(v) != nd or not all(isinstance(a, int) for a in v):
        raise Unsupported(f"window parameters {v}")
    return v


@lowers("numpy_T", "t", "transpose", "permute")
def _transpose(o: _Op):
    """A 2-d transpose is `transpose2d` (a matmul reads it in place, see templates/gemm.py); any other
    permutation an index-mapped view."""
    x = o.x
    r = len(x.shape)
    if r == 2 and tuple(o.shape) == tuple(x.shape)[::-1]:
        return o.pw("transpose2d", [x])
    if o.name == "permute":
        perm = [int(d) % r for d in o.args[1]]
    elif o.name == "transpose":
        a, b = int(o.args[1]) % r, int(o.args[2]) % r
        perm = list(range(r))
        perm[a], perm[b] = perm[b], perm[a]
    else:
        raise Unsupported(f"aten::{o.name} of a {r}-d tensor")
    if perm == list(range(r)):
        return x
    return o.pw("permute", [x, perm])


@lowers("conv1d", "conv2d", "conv3d")
def _conv(o: _Op):
    """A forward convolution: one node (input, weight, bias) the conv template reads as an implicit GEMM."""
    nd = int(o.name[-2])
    x, w = o.args[0], o.args[1]
    pad = o.arg(4, "padding", 0)
    if isinstance(pad, str):
        raise Unsupported(f"aten::{o.name} with padding={pad!r}")
    if len(x.shape) != nd + 2:
        raise Unsupported(f"aten::{o.name} on an unbatched {len(x.shape)}-d input")
    attrs = dict(stride=_per_dim(o.arg(3, "stride", 1), nd, 1), padding=_per_dim(pad, nd, 0),
                 dilation=_per_dim(o.arg(5, "dilation", 1), nd, 1), groups=int(o.arg(6, "groups", 1) or 1))
    return o.b.add("conv", o.name, [x, w, o.arg(2, "bias")], o.shape, o.dtype, attrs=attrs)


@lowers("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_transpose(o: _Op):
    """A transposed convolution: the same node kind, read by the conv template as a gather
    (an output pixel sums the inputs whose strided footprint covers it)."""
    nd = int(o.name[-2])
    x, w = o.args[0], o.args[1]
    if len(x.shape) != nd + 2:
        raise Unsupported(f"aten::{o.name} on an unbatched {len(x.shape)}-d input")
    attrs = dict(stride=_per_dim(o.arg(3, "stride", 1), nd, 1), padding=_per_dim(o.arg(4, "padding", 0), nd, 0),
                 dilation=_per_dim(o.arg(7, "dilation", 1), nd, 1), groups=int(o.arg(6, "groups", 1) or 1),
                 transposed=True)
    return o.b.add("conv", o.name, [x, w, o.arg(2, "bias")], o.shape, o.dtype, attrs=attrs)


@lowers("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d")
def _adaptive_avg_pool(o: _Op):
    """Global (output size 1): a mean over the spatial dims; an output size that divides the input:
    an average pool with kernel = stride = input / output."""
    nd = int(o.name[-2])
    x = o.x
    sp = list(x.shape[-nd:])
    out = _per_dim(o.arg(1, "output_size"), nd, None)
    if any(s % q for s, q in zip(sp, out)):
        raise Unsupported(f"aten::{o.name} to {out} from {sp} (windows of different sizes)")
    if all(q == 1 for q in out):
        dims = tuple(range(len(x.shape) - nd, len(x.shape)))
        s = o.red("sum", x, dims, True, o.dtype)
        return o.pw("div", [s, _count(dims, x)], s.shape)
    k = [s // q for s, q in zip(sp, out)]
    attrs = dict(kind="avg", kernel=k, stride=k, padding=[0] * nd, dilation=[1] * nd, count_include_pad=True, divisor=0)
    return o.b.add("pool", f"avg_pool{nd}d", [x], o.shape, o.dtype, attrs=attrs)


@lowers("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d")
def _pool(o: _Op):
    nd = int(o.name[-2])
    x = o.x
    if len(x.shape) < nd + 1:
        raise Unsupported(f"aten::{o.name} on a {len(x.shape)}-d input")
    k = _per_dim(o.arg(1, "kernel_size"), nd, None)
    s = _per_dim(o.arg(2, "stride"), nd, k)
    p = _per_dim(o.arg(3, "padding"), nd, 0)
    if o.name.startswith("max"):
        d = _per_dim(o.arg(4, "dilation"), nd, 1)
        attrs = dict(kind="max", kernel=k, stride=s, padding=p, dilation=d, count_include_pad=True, divisor=0)
    else:
        include = o.arg(5, "count_include_pad", True)
        div = o.arg(6, "divisor_override", None)
        attrs = dict(kind="avg", kernel=k, stride=s, padding=p, dilation=[1] * nd,
                     count_include_pad=bool(True if include is None else include), divisor=int(div or 0))
    return o.b.add("pool", o.name, [x], o.shape, o.dtype, attrs=attrs)


def _normalize(o: _Op, xv: Node, dims: tuple, eps: float) -> Node:
    """(x - mean) * rsqrt(var + eps) over `dims` of xv (biased variance, as the norms use)."""
    n = _count(dims, xv)
    rs = _rshape(xv.shape, dims, True)
    mean = o.pw("div", [o.red("sum", xv, dims, True, o.dtype), n], rs)
    xc = o.pw("sub", [xv, mean], xv.shape)
    var = o.pw("div", [o.red("sum", o.pw("mul", [xc, xc], xv.shape), dims, True, o.dtype), n], rs)
    return o.pw("mul", [xc, o.pw("rsqrt", [o.pw("add", [var, float(eps)], rs)], rs)], xv.shape)


def _affine(o: _Op, y: Node, w, b) -> Node:
    cs = (1, o.x.shape[1]) + (1,) * (len(o.x.shape) - 2)
    if w is not None:
        y = o.pw("mul", [y, o.pw("view", [w], cs)])
    if b is not None:
        y = o.pw("add", [y, o.pw("view", [b], cs)])
    return y


@lowers("instance_norm")
def _instance_norm(o: _Op):
    x = o.x
    w, b = o.arg(1, "weight"), o.arg(2, "bias")
    use_stats, eps = o.arg(5, "use_input_stats", True), o.arg(7, "eps", 1e-5)
    if not use_stats:
        raise Unsupported("aten::instance_norm with running statistics")
    y = _normalize(o, x, tuple(range(2, len(x.shape))), eps)
    return _affine(o, y, w, b)


@lowers("group_norm")
def _group_norm(o: _Op):
    x = o.x
    G, w, b, eps = int(o.arg(1, "num_groups")), o.arg(2, "weight"), o.arg(3, "bias"), o.arg(4, "eps", 1e-5)
    N, C = x.shape[0], x.shape[1]
    if C % G:
        raise Unsupported(f"aten::group_norm of {C} channels in {G} groups")
    gshape = (N, G, C // G) + tuple(x.shape[2:])  # a group's channels and positions are contiguous (NC...)
    y = _normalize(o, o.pw("view", [x], gshape), tuple(range(2, len(gshape))), eps)
    return _affine(o, o.pw("view", [y], x.shape), w, b)


@lowers("einsum")
def _einsum(o: _Op):
    """An einsum of explicit output, each operand's indices distinct: the matmul of a tensor's last dim with a
    matrix ("bijl,lk->bijk") is one GEMM of big M; any other is contracted pairwise left to right, as torch.einsum
    does (Mamba-2's "bclhn,bcshn,bhcls,bcshp->bclhp": a batched matmul, a product, a batched matmul)."""
    eq, ops = o.args[0], list(o.args[1])
    lhs, arrow, out = str(eq).replace(" ", "").partition("->")
    specs = lhs.split(",")
    if not arrow or "." in eq or len(specs) != len(ops) or len(set(out)) != len(out) \
            or any(len(set(s)) != len(s) or len(s) != len(x.shape) for s, x in zip(specs, ops)) \
            or not set(out) <= set("".join(specs)):
        raise Unsupported(f"aten::einsum {eq!r} (an explicit output, each operand's indices distinct)")
    if len(specs) == 2:
        s1, s2 = specs
        if len(s2) == 2 and s1 and s1[-1] == s2[0] and out == s1[:-1] + s2[1] and len(set(s1 + s2[1])) == len(s1) + 1:
            return o.b.add("gemm", "mm", [ops[0], ops[1], None], o.shape, o.dtype)
    cur, cs = _sum_out(o, ops[0], specs[0], set(out) | set("".join(specs[1:])))
    for i in range(1, len(ops)):
        later = set(out) | set("".join(specs[i + 1:]))
        nxt, ns = _sum_out(o, ops[i], specs[i], later | set(cs))
        cur, cs = _contract(o, cur, cs, nxt, ns, later)
    cur, cs = _sum_out(o, cur, cs, set(out))
    return _permuted(o, cur, cs, out)


def _sum_out(o: _Op, x: Node, s: str, keep: set) -> tuple[Node, str]:
    """x (indices s) summed over the indices no one else reads."""
    dims = tuple(i for i, c in enumerate(s) if c not in keep)
    if not dims:
        return x, s
    return o.red("sum", x, dims, False, o.dtype), "".join(c for c in s if c in keep)


def _permuted(o: _Op, x: Node, s: str, order: str) -> Node:
    """x (indices s) with its dims in `order` (a permutation of s)."""
    if s == order:
        return x
    shape = tuple(x.shape[s.index(c)] for c in order)
    if len(s) == 2:
        return o.pw("transpose2d", [x], shape)
    return o.pw("permute", [x, [s.index(c) for c in order]], shape)


def _contract(o: _Op, a: Node, sa: str, b: Node, sb: str, later: set) -> tuple[Node, str]:
    """One pairwise step of an einsum: the indices both read and no one after them are summed by a batched matmul
    (batch: the shared indices still needed; rows: a's own; columns: b's own); none such, a broadcast product."""
    size = {**{c: a.shape[i] for i, c in enumerate(sa)}, **{c: b.shape[i] for i, c in enumerate(sb)}}
    shared = [c for c in sa if c in sb]
    batch, contr = [c for c in shared if c in later], [c for c in shared if c not in later]
    fa, fb = [c for c in sa if c not in sb], [c for c in sb if c not in sa]
    prod = lambda cs: math.prod(size[c] for c in cs)  # noqa: E731
    if not contr:  # a product over the union of their indices, in a's order then b's own
        rs = sa + "".join(fb)
        av = o.pw("view", [a], tuple(a.shape) + (1,) * len(fb)) if fb else a
        bo = "".join(c for c in rs if c in sb)
        bv = _permuted(o, b, sb, bo)
        bv = o.pw("view", [bv], tuple(size[c] if c in sb else 1 for c in rs))
        return o.pw("mul", [av, bv], tuple(size[c] for c in rs)), rs
    nb, m, k, n = prod(batch), prod(fa), prod(contr), prod(fb)
    am = o.pw("view", [_permuted(o, a, sa, "".join(batch + fa + contr))], (nb, m, k) if nb > 1 else (m, k))
    bm = o.pw("view", [_permuted(o, b, sb, "".join(batch + contr + fb))], (nb, k, n) if nb > 1 else (k, n))
    g = o.b.add("gemm", "bmm" if nb > 1 else "mm", [am, bm, None], (nb, m, n) if nb > 1 else (m, n), o.dtype)
    rs = "".join(batch + fa + fb)
    return o.pw("view", [g], tuple(size[c] for c in rs)), rs


@lowers("tril", "triu")
def _triangle(o: _Op):
    if len(o.x.shape) < 2:
        raise Unsupported(f"aten::{o.name} of a {len(o.x.shape)}-d tensor")
    return o.pw(o.name, [o.x, int(o.arg(1, "diagonal", 0) or 0)])


@lowers("broadcast_tensors")
def _broadcast_tensors(o: _Op):
    xs = o.args[0]
    if len({tuple(x.shape) for x in xs}) != 1:
        raise Unsupported("aten::broadcast_tensors of different shapes")
    return list(xs)  # already one shape: each is itself


def _loss_reduce(o: _Op, per_elem: Node, reduction: int):
    """reduction 0 none, 1 mean, 2 sum (torch's enum)."""
    if reduction == 0:
        return per_elem
    dims = tuple(range(len(per_elem.shape)))
    s = o.red("sum", per_elem, dims, False, o.dtype)
    return s if reduction == 2 else o.pw("div", [s, float(math.prod(per_elem.shape))], s.shape)


@lowers("smooth_l1_loss", "huber_loss", "mse_loss", "l1_loss")
def _pointwise_loss(o: _Op):
    x, y = o.args[0], o.args[1]
    if tuple(x.shape) != tuple(y.shape):
        raise Unsupported(f"aten::{o.name} of different shapes")
    red = o.arg(2, "reduction", 1)
    d = o.pw("sub", [x, y], x.shape)
    if o.name == "mse_loss":
        e = o.pw("mul", [d, d], x.shape)
    elif o.name == "l1_loss":
        e = o.pw("abs", [d], x.shape)
    else:  # smooth L1 (beta) and Huber (delta): written with clamps, no branch
        beta = float(o.arg(3, "beta" if o.name == "smooth_l1_loss" else "delta", 1.0))
        if beta <= 0:
            raise Unsupported(f"aten::{o.name} with beta {beta}")
        a = o.pw("abs", [d], x.shape)
        m = o.pw("clamp_max", [a, beta], x.shape)
        quad = o.pw("mul", [o.pw("mul", [m, m], x.shape), 0.5 / beta if o.name == "smooth_l1_loss" else 0.5], x.shape)
        lin = o.pw("clamp_min", [o.pw("sub", [a, beta], x.shape), 0.0], x.shape)
        if o.name == "huber_loss":
            lin = o.pw("mul", [lin, beta], x.shape)
        e = o.pw("add", [quad, lin], x.shape)
    return _loss_reduce(o, e, int(red))


@lowers("triplet_margin_loss")
def _triplet_margin_loss(o: _Op):
    """max(d(a, p) - d(a, n) + margin, 0) with d the p-norm of (x1 - x2 + eps) over the last dim
    (torch's pairwise_distance), then the reduction; p = 2 and no swap."""
    a, pos, neg = o.args[:3]
    margin, p, eps = float(o.arg(3, "margin", 1.0)), float(o.arg(4, "p", 2.0)), float(o.arg(5, "eps", 1e-6))
    swap, red = bool(o.arg(6, "swap", False)), int(o.arg(7, "reduction", 1))
    if p != 2.0 or swap or len(a.shape) != 2 or not (tuple(a.shape) == tuple(pos.shape) == tuple(neg.shape)):
        raise Unsupported(f"aten::triplet_margin_loss with p={p}, swap={swap} on {len(a.shape)}-d inputs")

    def dist(x2):
        d = o.pw("add", [o.pw("sub", [a, x2], a.shape), eps], a.shape)
        s = o.red("sum", o.pw("mul", [d, d], a.shape), (1,), False, o.dtype)
        return o.pw("sqrt", [s], s.shape)
    dp, dn = dist(pos), dist(neg)
    rs = dp.shape
    per = o.pw("clamp_min", [o.pw("add", [o.pw("sub", [dp, dn], rs), margin], rs), 0.0], rs)
    return _loss_reduce(o, per, red)


@lowers("cross_entropy_loss")
def _cross_entropy(o: _Op):
    """Class indices only: logsumexp over the classes minus the target's logit a row, rows whose
    target is ignore_index left out of the sum and of the mean's count; no weight, no smoothing."""
    x, t = o.args[0], o.args[1]
    red, ii, ls = int(o.arg(3, "reduction", 1)), int(o.arg(4, "ignore_index", -100)), float(o.arg(5, "label_smoothing", 0.0))
    if o.arg(2, "weight") is not None or ls or len(x.shape) != 2 or not isinstance(t, Node) or t.dtype != "int64" \
            or len(t.shape) != 1:
        raise Unsupported("aten::cross_entropy_loss with class weights, label smoothing, probabilities or extra dims")
    n = (x.shape[0],)
    m = o.red("amax", x, (1,), True, o.dtype)
    s = o.red("sum", o.pw("exp", [o.pw("sub", [x, m], x.shape)], x.shape), (1,), False, o.dtype)
    lse = o.pw("add", [o.pw("log", [s], n), o.pw("view", [m], n)], n)
    picked = o.pw("gather_row", [x, t], n)
    valid = o.pw("ne_const", [t, float(ii)], n)
    per = o.pw("mul", [o.pw("sub", [lse, picked], n), valid], n)
    if red == 0:
        return per
    total = o.red("sum", per, (0,), False, o.dtype)
    if red == 2:
        return total
    count = o.red("sum", o.pw("ne_const", [t, float(ii)], n), (0,), False, o.dtype)  # its own mask: a cut stays clean
    return o.pw("div", [total, count], ())


@lowers("kl_div")
def _kl_div(o: _Op):
    x, t = o.args[0], o.args[1]
    if tuple(x.shape) != tuple(t.shape):
        raise Unsupported("aten::kl_div of different shapes")
    red, log_target = int(o.arg(2, "reduction", 1)), bool(o.arg(3, "log_target", False))
    if log_target:  # exp(t) * (t - x)
        e = o.pw("mul", [o.pw("exp", [t], t.shape), o.pw("sub", [t, x], t.shape)], t.shape)
    else:  # t * (log t - x): PyTorch's xlogy gives 0 where t == 0, which random inputs never hit exactly
        e = o.pw("mul", [t, o.pw("sub", [o.pw("log", [t], t.shape), x], t.shape)], t.shape)
    return _loss_reduce(o, e, red)


@lowers("batch_norm", "_native_batch_norm_legit_no_training")
def _batch_norm(o: _Op):
    x, args = o.x, o.args
    training = False
    if o.name == "batch_norm":
        _, w, bias, rm, rv, training, _mom, eps = args[:8]
    else:
        _, w, bias, rm, rv, _mom, eps = args[:7]
    cs = (1, x.shape[1]) + (1,) * (o.rank - 2)

    def chan(t):
        return o.pw("view", [t], cs)
    if training or rm is None:  # the module as its file leaves it (nn.Module starts in training mode): the
        # batch's statistics per channel over the batch and positions, the variance biased; the running
        # averages it also updates are no part of the output
        dims = (0,) + tuple(range(2, o.rank))
        n = _count(dims, x)
        mean = o.pw("div", [o.red("sum", x, dims, True, o.dtype), n], cs)
        xc = o.pw("sub", [x, mean], x.shape)
        var = o.pw("div", [o.red("sum", o.pw("mul", [xc, xc], x.shape), dims, True, o.dtype), n], cs)
        y = o.pw("mul", [xc, o.pw("rsqrt", [o.pw("add", [var, float(eps)], cs)], cs)], x.shape)
    else:
        inv = o.pw("rsqrt", [o.pw("add", [chan(rv), float(eps)], cs)], cs)
        y = o.pw("mul", [o.pw("sub", [x, chan(rm)], x.shape), inv], x.shape)
    if w is not None:
        y = o.pw("mul", [y, chan(w)], x.shape)
    if bias is not None:
        y = o.pw("add", [y, chan(bias)], x.shape)
    return [y, y, y] if o.name != "batch_norm" else y


GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}  # gate rows of W_ih / W_hh per hidden unit


@lowers(*GATES)
def _recurrent(o: _Op):
    """nn.LSTM, nn.GRU, nn.RNN (any layers, bidirectional or not, biases or not, batch_first or not): per
    layer and direction, the input projection of every time step as one GEMM (with the biases that add
    outside the recurrence in its epilogue); then per layer the recurrence over time as an "rnn" node
    (templates/recurrent.py), a bidirectional layer's two directions one node (attrs "pair") writing both
    halves of their concatenated output.
    Returns (output, h_n[, c_n]). An LSTM's c_n comes from a twin of each recurrence that writes c
    instead of h (pruned, like every unread node, when the task does not read c_n)."""
    cell, G = o.name.removeprefix("rnn_") if o.name != "lstm" else "lstm", GATES[o.name]
    x, hx, flat = o.args[0], o.args[1], list(o.args[2])
    has_bias, layers, _dropout, train, bidir, batch_first = o.args[3:9]
    states = list(hx) if cell == "lstm" else [hx]
    if not isinstance(x, Node) or len(x.shape) != 3:
        raise Unsupported(f"aten::{o.name} on an unbatched input")
    if train and _dropout:
        raise Unsupported(f"aten::{o.name} with dropout in training mode")
    dirs = 2 if bidir else 1
    per = 4 if has_bias else 2
    if len(flat) != per * layers * dirs or flat[1].shape[0] != G * flat[1].shape[1]:
        raise Unsupported(f"aten::{o.name} with projections (proj_size)")
    b, dt = o.b, x.dtype
    H = flat[1].shape[1]
    T, B = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    seq = (B, T) if batch_first else (T, B)
    t_dim = 1 if batch_first else 0
    lasts, c_lasts, cur = [], [], x

    def final(steps: Node, reverse: bool) -> Node:  # the last step taken (t = 0 walking back), as (1, B, H)
        one = b.add("pw", "narrow", [steps, t_dim, 0 if reverse else T - 1], (B, 1, H) if batch_first else (1, B, H), dt)
        return b.add("pw", "view", [one], (1, B, H), dt)
    for layer in range(layers):
        args = []
        for d in range(dirs):  # PyTorch's order: layer by layer, the forward direction then the reverse one
            at = per * (layer * dirs + d)
            w_ih, w_hh = flat[at], flat[at + 1]
            b_ih, b_hh = (flat[at + 2], flat[at + 3]) if has_bias else (None, None)
            if not (isinstance(w_hh, Node) and w_hh.kind in ("param", "input")):
                raise Unsupported(f"aten::{o.name} whose recurrent weight is computed")
            proj = b.add("gemm", "linear", [cur, w_ih, b_ih], seq + (G * H,), dt)
            if b_hh is not None and cell != "gru":  # a GRU's b_hn sits inside r * (W_hn h + b_hn): the recurrence adds it
                proj = b.add("pw", "add", [proj, b_hh], proj.shape, dt)
            init = []
            for s in states:
                one = b.add("pw", "narrow", [s, 0, layer * dirs + d], (1, B, H), dt)
                init.append(b.add("pw", "view", [one], (B, H), dt))
            args += [proj, w_hh, *init, *([b_hh] if cell == "gru" else [])]  # a GRU's b_hh: None without biases
        # A bidirectional layer's two directions are one recurrence (a "pair": both walk at once, each writing its
        # half of the concatenated steps): they are independent, and each alone leaves most SMs idle
        out = b.add("rnn", cell, args, seq + (dirs * H,), dt,
                    attrs={"batch_first": bool(batch_first), **({"pair": True} if dirs == 2 else {"reverse": False})})
        c_seq = b.add("rnn", cell, list(args), out.shape, dt, attrs={**out.attrs, "emit": "c"}) if cell == "lstm" else None
        for d in range(dirs):  # h_n's (and c_n's) entries: the last step each direction takes
            for steps, into in ((out, lasts), (c_seq, c_lasts)):
                if steps is not None:
                    half = steps if dirs == 1 else b.add("pw", "narrow", [steps, 2, d * H], seq + (H,), dt)
                    into.append(final(half, d == 1))
        cur = out

    def stack(xs):
        out = xs[0]
        for h in xs[1:]:
            out = b.add("pw", "cat", [out, h, 0], (out.shape[0] + 1, B, H), dt)
        return out
    return [cur, stack(lasts)] + ([stack(c_lasts)] if cell == "lstm" else [])


def _lower(name, fx, args, kwargs, meta, nodes) -> Node | list:
    fn = LOWER.get(name)
    if fn is None:
        raise Unsupported(f"aten::{name}")
    shape = tuple(meta.shape) if isinstance(meta, torch.Tensor) else ()
    dtype = _dt(meta) if isinstance(meta, torch.Tensor) else "float32"
    return fn(_Op(name, args, kwargs, shape, dtype, _B(nodes)))
