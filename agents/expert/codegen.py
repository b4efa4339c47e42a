"""C expressions for the lowered op graph: pointwise math in float, broadcast index maps,
loads and stores in each tensor's own dtype. Statements are emitted once per (node, index)."""
from __future__ import annotations

import math

from agents.expert.opgraph import Node, Unsupported

CTYPE = {"float32": "float", "bfloat16": "__nv_bfloat16", "float16": "__half", "int64": "long long",
         "int32": "int", "bool": "bool"}
# activations cheaper than their libm composition, plain C++ (tests/cpu_emulator.py keeps them as they are)
MATH_PRELUDE = r"""// max and min that keep a NaN, as torch's relu/clamp/maximum/amax do (fmaxf/fminf return the other operand):
// one max.NaN/min.NaN instruction from sm_80 on (a compare, a NaN test and a select before it: a max pool's folds
// are a third of its instructions), the same in plain C++ elsewhere (the CPU emulator)
__device__ __forceinline__ float egg_max(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float d; asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b)); return d;
#else
    return (a > b || a != a) ? a : b;
#endif
}
__device__ __forceinline__ float egg_min(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float d; asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b)); return d;
#else
    return (a < b || a != a) ? a : b;
#endif
}
__device__ __forceinline__ float egg_mish(float x) {
    // x tanh(log1p(e^x)) = x n / (n + 2), n = e^x (e^x + 2): one expf and a divide where tanhf(log1pf(expf))
    // takes ~90 PTX instructions to this one's ~25 (a conv's epilogue runs it on every output); exact to a few
    // ulp (no cancellation: n >= 0). Past 20, tanh(softplus) is 1 in fp32 (and n would overflow)
    const float t = expf(x), n = t * (t + 2.0f);
    return x > 20.0f ? x : x * n / (n + 2.0f);
}
"""

PRELUDE = r"""#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(long long x) { return (float)x; }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half(x); }
""" + MATH_PRELUDE

# the thread-block cluster's PTX, behind small functions (tests/cpu_emulator.py gives C++ versions):
# recurrences and rows that a cluster of blocks shares
CLUSTER_PRELUDE = r"""__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ float* cluster_map(float* p, unsigned rank) {  // p in block `rank`'s shared memory
    unsigned long long r;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
    return reinterpret_cast<float*>(r);
}
__device__ __forceinline__ void cluster_sync() {  // every thread of every block of the cluster; orders shared memory
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"""


def lit(v) -> str:
    if isinstance(v, bool):
        return "1.0f" if v else "0.0f"
    v = float(v)
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v!r}f" if "e" in repr(v) or "." in repr(v) else f"{v!r}.0f"


def _arg(args, i, default):
    return args[i] if len(args) > i and args[i] is not None else default


def pw_expr(op: str, a: list[str], raw: list) -> str:
    """C expression of one pointwise op; `a` holds operand expressions, `raw` the original args."""
    x = a[0]
    if op in ("view", "cast", "broadcast"):
        return x
    def s(i, d):  # a scalar argument as a literal (the table is built eagerly: tolerate non-scalars)
        v = _arg(raw, i, d)
        return lit(v) if isinstance(v, (int, float)) else lit(d)
    table = {
        "relu": f"egg_max({x}, 0.0f)",
        "leaky_relu": f"({x} > 0.0f ? {x} : {x} * {s(1, 0.01)})",
        "gelu": (f"(0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x}))))"
                 if _arg(raw, 1, "none") == "tanh" else f"(0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f)))"),
        "selu": f"(1.0507009873554805f * ({x} > 0.0f ? {x} : 1.6732632423543772f * expm1f({x})))",
        "elu": f"({x} > 0.0f ? {s(2, 1.0)} * {x} : {s(2, 1.0)} * {s(1, 1.0)} * expm1f({x} * {s(3, 1.0)}))",
        "celu": f"({x} > 0.0f ? {x} : {s(1, 1.0)} * expm1f({x} / {s(1, 1.0)}))",
        "softplus": f"(({x}) * {s(1, 1.0)} > {s(2, 20.0)} ? ({x}) : log1pf(expf(({x}) * {s(1, 1.0)})) / {s(1, 1.0)})",
        "hardtanh": f"egg_min(egg_max({x}, {s(1, -1.0)}), {s(2, 1.0)})",
        "hardsigmoid": f"egg_min(egg_max({x} / 6.0f + 0.5f, 0.0f), 1.0f)",
        "hardswish": f"({x} * egg_min(egg_max({x} + 3.0f, 0.0f), 6.0f) / 6.0f)",
        "silu": f"({x} / (1.0f + expf(-({x}))))",
        "sigmoid": f"(1.0f / (1.0f + expf(-({x}))))",
        "log_sigmoid": f"(fminf({x}, 0.0f) - log1pf(expf(-fabsf({x}))))",
        "mish": f"egg_mish({x})",
        "tanh": f"tanhf({x})", "exp": f"expf({x})", "log": f"logf({x})", "sqrt": f"sqrtf({x})",
        "rsqrt": f"rsqrtf({x})", "abs": f"fabsf({x})", "neg": f"(-({x}))", "sin": f"sinf({x})",
        "ne_const": f"(({x}) != {s(1, 0.0)} ? 1.0f : 0.0f)",
        "cos": f"cosf({x})", "tan": f"tanf({x})", "atan": f"atanf({x})", "sinh": f"sinhf({x})",
        "cosh": f"coshf({x})", "asinh": f"asinhf({x})", "erf": f"erff({x})", "log1p": f"log1pf({x})",
        "expm1": f"expm1f({x})", "exp2": f"exp2f({x})", "log2": f"log2f({x})", "floor": f"floorf({x})",
        "ceil": f"ceilf({x})", "round": f"rintf({x})", "trunc": f"truncf({x})", "frac": f"({x} - truncf({x}))",
        "reciprocal": f"(1.0f / ({x}))", "square": f"({x} * {x})",
        "sign": f"(float)(({x} > 0.0f) - ({x} < 0.0f))",
        "tanhshrink": f"({x} - tanhf({x}))",
        "hardshrink": f"(fabsf({x}) <= {s(1, 0.5)} ? 0.0f : {x})",
        "softshrink": f"(fabsf({x}) <= {s(1, 0.5)} ? 0.0f : {x} - copysignf({s(1, 0.5)}, {x}))",
        "threshold": f"({x} <= {s(1, 0.0)} ? {s(2, 0.0)} : {x})",
        "logit": f"logf(({x}) / (1.0f - ({x})))",
    }
    if op in table:
        return table[op]
    if op in ("clamp", "clamp_min", "clamp_max"):
        lo = _arg(raw, 1, None) if op != "clamp_max" else None
        hi = _arg(raw, 2, None) if op == "clamp" else (_arg(raw, 1, None) if op == "clamp_max" else None)
        e = x
        if lo is not None:
            e = f"egg_max({e}, {a[1] if isinstance(raw[1], Node) else lit(lo)})"
        if hi is not None:
            hi_e = a[2 if op == "clamp" else 1] if isinstance(raw[2 if op == "clamp" else 1], Node) else lit(hi)
            e = f"egg_min({e}, {hi_e})"
        return e
    if op == "pow":
        p = raw[1]
        if isinstance(p, Node):
            return f"powf({x}, {a[1]})"
        if isinstance(raw[0], (int, float)):
            return f"powf({lit(raw[0])}, {a[1]})"
        return {2: f"({x} * {x})", 3: f"({x} * {x} * {x})", 0.5: f"sqrtf({x})", 1: x, -1: f"(1.0f / ({x}))",
                -0.5: f"rsqrtf({x})"}.get(p, f"powf({x}, {lit(p)})")
    y = a[1] if len(a) > 1 else None
    cmp = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    if op in cmp:  # a boolean as 1.0 / 0.0 (read by where / masked_fill, or multiplied)
        return f"(({x}) {cmp[op]} ({y}) ? 1.0f : 0.0f)"
    if op == "where":
        return f"(({x}) != 0.0f ? ({y}) : ({a[2]}))"
    if op == "masked_fill":
        return f"(({y}) != 0.0f ? ({a[2]}) : ({x}))"
    alpha = raw[2] if len(raw) > 2 and isinstance(raw[2], (int, float)) and raw[2] is not None else 1
    if op == "add":
        return f"({x} + {y})" if alpha == 1 else f"({x} + {lit(alpha)} * {y})"
    if op == "sub":
        return f"({x} - {y})" if alpha == 1 else f"({x} - {lit(alpha)} * {y})"
    if op == "rsub":
        return f"({y} - {x})" if alpha == 1 else f"({y} - {lit(alpha)} * {x})"
    if op == "mul":
        return f"({x} * {y})"
    if op == "div":
        return f"({x} / {y})"
    if op == "maximum":
        return f"egg_max({x}, {y})"
    if op == "minimum":
        return f"egg_min({x}, {y})"
    raise Unsupported(f"aten::{op}")


def strides(shape) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return list(reversed(out))


def bmap(src_shape: tuple, dst_shape: tuple, idx: str) -> str:
    """Index into a contiguous tensor of `src_shape` broadcast to `dst_shape`, from linear `idx` of dst."""
    src_shape, dst_shape = tuple(src_shape), tuple(dst_shape)
    if src_shape == dst_shape:
        return idx
    n_src = math.prod(src_shape)
    if n_src == 1:
        return "0"
    pad = (1,) * (len(dst_shape) - len(src_shape)) + src_shape
    if len(pad) != len(dst_shape) or any(p not in (1, d) for p, d in zip(pad, dst_shape)):
        raise Unsupported(f"broadcast of {src_shape} to {dst_shape}")
    ds, ss = strides(dst_shape), strides(pad)
    live = [i for i, (p, d) in enumerate(zip(pad, dst_shape)) if p == d and d != 1]
    # contiguous run of live dims: one div and one mod
    if live == list(range(live[0], live[-1] + 1)):
        inner = ds[live[-1]]
        q = f"({idx})" if inner == 1 else f"(({idx}) / {inner}LL)"
        return q if live[0] == 0 else f"({q} % {n_src}LL)"
    terms = []
    for i in live:
        terms.append(f"((({idx}) / {ds[i]}LL) % {dst_shape[i]}LL) * {ss[i]}LL")
    return "(" + " + ".join(terms) + ")"


LONG_INDEX = 400  # characters of an index expression past which the emitter binds it to a variable


class Emitter:
    """Emits `float vN = ...;` statements for node values at linear indices.

    `load(node, idx)` says how to read an input/param; `special(node)` returns an expression
    for nodes whose value is given (a reduction's accumulator, the GEMM accumulator)."""

    def __init__(self, load, special=None, prefix="v", alias: dict | None = None):
        self.load, self.special = load, special or (lambda n: None)
        self.alias = alias or {}  # id(node) -> the node read in its place (a fused chain's tensor now a kernel input)
        self.lines: list[str] = []
        self.cache: dict[tuple[str, str], str] = {}
        self.prefix = prefix
        self.count = 0

    def value(self, n: Node, idx: str) -> str:
        if isinstance(n, (int, float, bool)):
            return lit(n)
        n = self.alias.get(id(n), n)
        if len(idx) > LONG_INDEX:  # an index map's index of an index map's...: named once, or a chain of
            # concatenations (a stack of 256 steps) grows its text threefold a link
            name = self.cache.get(("index", idx))
            if name is None:
                self.count += 1
                name = self.cache[("index", idx)] = f"{self.prefix}i{self.count}"
                self.lines.append(f"const long long {name} = {idx};")
            idx = name
        key = (n.name, idx)
        if key in self.cache:
            return self.cache[key]
        sp = self.special(n)
        if sp is not None:
            return sp
        if n.kind in ("input", "param"):
            e = self.load(n, idx)
        elif n.kind == "pw":
            if n.op == "view":
                src = n.args[0]
                e = self.value(src, idx)  # same element count, contiguous: same linear index
            elif n.op == "gather_row":  # x[row, index[row]] of an (R, C) x: cross-entropy's picked logit
                x, t = n.args[0], n.args[1]
                C = x.shape[-1]
                col = f"(long long)fminf(fmaxf({self.value(t, idx)}, 0.0f), {float(C - 1)!r}f)"  # never out of the row
                e = self.value(x, f"(({idx}) * {C}LL + {col})")
            elif n.op == "permute":  # out dim k is input dim perm[k]: re-stride the multi-index
                x, perm = n.args
                ins = [math.prod(x.shape[d + 1:]) for d in range(len(x.shape))]
                terms = [f"((({idx}) / {math.prod(n.shape[k + 1:])}LL) % {n.shape[k]}LL) * {ins[perm[k]]}LL"
                         for k in range(len(n.shape)) if n.shape[k] > 1]
                e = self.value(x, " + ".join(terms) if terms else "0LL")
            elif n.op == "transpose2d":  # the last two dims swapped (a matmul operand is read in place instead)
                x = n.args[0]
                A, B = n.shape[-2], n.shape[-1]
                e = self.value(x, f"((({idx}) / {A * B}LL) * {A * B}LL + (({idx}) % {B}LL) * {A}LL + (({idx}) / {B}LL) % {A}LL)")
            elif n.op == "full":  # zeros_like / ones_like: a constant, nothing read
                e = lit(float(n.args[0]))
            elif n.op == "narrow":  # a slice along dim d from `start` (every `step`-th): position j reads start + j * step
                x, d, start = n.args[:3]
                step = n.args[3] if len(n.args) > 3 else 1
                R, Rx, inner = n.shape[d], x.shape[d], math.prod(n.shape[d + 1:])
                j = f"(({idx}) / {inner}LL) % {R}LL" + (f" * {step}LL" if step != 1 else "")
                e = self.value(x, f"((({idx}) / {R * inner}LL) * {Rx}LL + {j} + {start}LL) "
                                  f"* {inner}LL + ({idx}) % {inner}LL")
            elif n.op == "pad":  # per dim, position p reads p - before inside x (clamped: every read in bounds), else the value
                x, before, v = n.args
                inside, terms = [], []
                for k in range(len(n.shape)):
                    p = f"((({idx}) / {math.prod(n.shape[k + 1:])}LL) % {n.shape[k]}LL - {before[k]}LL)"
                    if before[k] or n.shape[k] != x.shape[k]:
                        inside.append(f"{p} >= 0LL && {p} < {x.shape[k]}LL")
                        p = f"min(max({p}, 0LL), {x.shape[k] - 1}LL)"
                    if x.shape[k] > 1:
                        terms.append(f"{p} * {math.prod(x.shape[k + 1:])}LL")
                e = self.value(x, " + ".join(terms) if terms else "0LL")
                e = f"(({' && '.join(inside) or 'true'}) ? {e} : {lit(float(v))})"
            elif n.op == "repeat":  # tiles: per dim, the position modulo the source's size
                x = n.args[0]
                xs = (1,) * (len(n.shape) - len(x.shape)) + tuple(x.shape)
                terms = [f"(((({idx}) / {math.prod(n.shape[k + 1:])}LL) % {n.shape[k]}LL) % {xs[k]}LL) * "
                         f"{math.prod(xs[k + 1:])}LL" for k in range(len(n.shape)) if xs[k] > 1]
                e = self.value(x, " + ".join(terms) if terms else "0LL")
            elif n.op == "roll":  # along d by s: position p reads p - s (mod the size)
                x, d, sh = n.args
                R, inner = n.shape[d], math.prod(n.shape[d + 1:])
                pos = f"((({idx}) / {inner}LL) % {R}LL)"
                e = self.value(x, f"(({idx}) + ((({pos} + {R - sh}LL) % {R}LL) - {pos}) * {inner}LL)")
            elif n.op == "take_rows":  # x[idx]: row idx[j] of x for the j-th index, the rest of the row as is
                x, ix = n.args
                inner = math.prod(x.shape[1:])
                row = self.value(ix, f"(({idx}) / {inner}LL)")
                e = self.value(x, f"((long long)({row}) * {inner}LL + ({idx}) % {inner}LL)")
            elif n.op == "unfold":  # windows along d as a new last dim: x[..., i * step + j, ...]
                x, d, size, step = n.args
                nwin, Sx, inner = n.shape[d], x.shape[d], math.prod(x.shape[d + 1:])
                j, rest = f"(({idx}) % {size}LL)", f"(({idx}) / {size}LL)"
                i, o = f"(({rest} / {inner}LL) % {nwin}LL)", f"({rest} / {inner * nwin}LL)"
                e = self.value(x, f"(({o} * {Sx}LL + {i} * {step}LL + {j}) * {inner}LL + {rest} % {inner}LL)")
            elif n.op == "cat":  # tensors along d: the position picks one, and only its piece is read
                var = self._cat(n, idx)
                self.cache[key] = var
                return var
            elif n.op in ("tril", "triu"):  # keep an element by its (row, col) in the last two dims
                rows, cols = n.shape[-2], n.shape[-1]
                d = int(n.args[1]) if len(n.args) > 1 and n.args[1] is not None else 0
                col_minus_row = f"((({idx}) % {cols}LL) - ((({idx}) / {cols}LL) % {rows}LL))"
                keep = f"{col_minus_row} <= {d}LL" if n.op == "tril" else f"{col_minus_row} >= {d}LL"
                e = f"({keep} ? {self.value(n.args[0], idx)} : 0.0f)"
            else:
                ops = [self.value(a, bmap(a.shape, n.shape, idx)) if isinstance(a, Node) else
                       (lit(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else "")
                       for a in n.args]
                e = pw_expr(n.op, ops, n.args)
        else:
            raise Unsupported(f"{n.kind} {n.op} inside a fused expression")
        self.count += 1
        var = f"{self.prefix}{self.count}"
        self.lines.append(f"float {var} = {e};")
        self.cache[key] = var
        return var

    def _cat(self, n: Node, idx: str) -> str:
        """A concatenation along d as one select over all its pieces: nested pairwise cats along the same
        d (how `torch.cat` of a list lowers: a DenseNet layer's 49 pieces, a 256-step stack) are flattened,
        the position along d is computed once, and a balanced tree of comparisons picks the piece (depth
        log2 of the pieces, where the nested form tested and re-indexed through every level an element).
        Only the picked piece is read; its index stays in bounds (clamped) all the same."""
        d = n.args[2]
        pieces, cur = [], n
        while isinstance(cur, Node) and cur.kind == "pw" and cur.op == "cat" and cur.args[2] == d:
            pieces.append(cur.args[1])
            cur = cur.args[0]
        pieces.append(cur)
        pieces.reverse()
        offs = [0]
        for p in pieces:
            offs.append(offs[-1] + p.shape[d])
        R, inner = n.shape[d], math.prod(n.shape[d + 1:])
        self.count += 1
        var = f"{self.prefix}{self.count}"
        o, j, i = f"{var}_o", f"{var}_j", f"{var}_i"
        self.lines += [f"const long long {o} = ({idx}) / {R * inner}LL, {j} = (({idx}) / {inner}LL) % {R}LL, "
                       f"{i} = ({idx}) % {inner}LL;", f"float {var};"]
        outside = dict(self.cache)  # what a branch computes is not visible after it

        def tree(lo: int, hi: int, depth: int) -> None:
            pad = "    " * depth
            if hi - lo == 1:
                p, Rp = pieces[lo], pieces[lo].shape[d]
                at = f"min(max({j} - {offs[lo]}LL, 0LL), {Rp - 1}LL)" if offs[lo] else f"min({j}, {Rp - 1}LL)"
                mark = len(self.lines)
                v = self.value(p, f"({o} * {Rp}LL + {at}) * {inner}LL + {i}")
                self.lines[mark:] = [pad + ln for ln in self.lines[mark:]]
                self.lines.append(f"{pad}{var} = {v};")
                self.cache = dict(outside)
                return
            mid = (lo + hi) // 2
            self.lines.append(f"{pad}if ({j} < {offs[mid]}LL) {{")
            tree(lo, mid, depth + 1)
            self.lines.append(f"{pad}}} else {{")
            tree(mid, hi, depth + 1)
            self.lines.append(f"{pad}}}")
        tree(0, len(pieces), 0)
        self.cache = outside
        return var

    def take(self, indent: str = "    ") -> str:
        body = "\n".join(indent + ln for ln in self.lines)
        self.lines, self.cache = [], {}
        return body


def per_output_head(n_out: int, waves: int, var: str = "o_lin") -> str:
    """The loop head of a thread-per-output kernel over `var`: grid-stride, or one output a thread
    (waves 0); the caller closes it with two braces."""
    if waves:
        return (f"    for (long long {var} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {var} < {n_out}LL;\n"
                f"         {var} += (long long)gridDim.x * blockDim.x) {{")
    return (f"    {{\n        const long long {var} = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"        if ({var} >= {n_out}LL) return;")


def per_output_grid(n_out: int, block: int, waves: int, sms: int, max_threads_per_sm: int) -> int:
    """Blocks for a thread-per-output kernel: all it needs, or at most `waves` full waves of the GPU."""
    need = max(1, -(-n_out // block))
    if not waves:
        return int(need)
    return int(min(need, sms * max(1, max_threads_per_sm // block) * waves))
