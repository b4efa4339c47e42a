"""The LSTM recurrence over time steps: gates = xp[t] + W_hh h_{t-1} (xp, the input projection with
both biases, is the GEMM before it), then i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the four
quarters, c = f c + i g, h = o tanh(c).

A persistent block per batch element walks all T steps itself: batch elements never exchange state,
so no grid-wide barrier is needed. h and c stay in shared memory between steps; each warp computes
whole gate rows (its lanes stride along the row of W_hh, coalesced, then a shuffle sum), so W_hh is
read from L2 once a step by each block. h_t is written to the output as it is made."""
from __future__ import annotations

from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import Node, OpGraph, Unsupported

MAX_SHARED = 48 * 1024  # static shared memory: h, c and the 4H gates


@dataclass
class RnnPlan:
    rnn: Node
    B: int
    T: int
    H: int
    batch_first: bool


@dataclass
class RnnKnobs:
    block: int = 512  # threads a batch element: warps share the 4H gate rows
    waves: int = 1  # grid = min(B, SMs x waves): one block per batch element where they fit


def plan_rnn(g: OpGraph) -> RnnPlan:
    rnns = [n for n in g.nodes if n.kind == "rnn"]
    if len(rnns) != 1 or any(n.kind in ("gemm", "conv", "reduce", "scan", "pool") for n in g.nodes):
        raise Unsupported("a recurrence beside other heavy ops in one kernel")
    r = rnns[0]
    if g.output is not r:
        raise Unsupported("ops after a recurrence in the same kernel")
    w = r.args[1]
    if w.kind not in ("param", "input"):
        raise Unsupported("a computed recurrent weight")
    B, T = (r.shape[0], r.shape[1]) if r.attrs["batch_first"] else (r.shape[1], r.shape[0])
    H = r.shape[2]
    if 6 * H * 4 > MAX_SHARED:
        raise Unsupported(f"an LSTM hidden size of {H} (h, c and the gates must fit in shared memory)")
    return RnnPlan(r, B, T, H, bool(r.attrs["batch_first"]))


def render(g: OpGraph, p: RnnPlan, k: RnnKnobs) -> str:
    if k.block % 32 or k.block > 1024:
        raise Unsupported("rnn block shape")
    r, B, T, H = p.rnn, p.B, p.T, p.H
    xp, w, h0, c0 = r.args
    tensors = g.inputs + g.params
    args = ", ".join([f"{CTYPE[r.dtype]}* __restrict__ out"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors])
    load = lambda t, idx: f"to_f({t.name}[{idx}])"  # noqa: E731
    init = Emitter(load, prefix="s")
    h_init, c_init = init.value(h0, "(b * {H}LL + j)".format(H=H)), init.value(c0, f"(b * {H}LL + j)")
    step = Emitter(load, prefix="x")
    row = f"((b * {T}LL + t) * {4 * H}LL + q)" if p.batch_first else f"((t * {B}LL + b) * {4 * H}LL + q)"
    x_val = step.value(xp, row)
    o_idx = f"((b * {T}LL + t) * {H}LL + j)" if p.batch_first else f"((t * {B}LL + b) * {H}LL + j)"
    ot = CTYPE[r.dtype]
    body = f"""    __shared__ float s_h[{H}], s_c[{H}], s_g[{4 * H}];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (long long b = blockIdx.x; b < {B}LL; b += gridDim.x) {{
        for (int j = tid; j < {H}; j += {k.block}) {{
{init.take("            ")}
            s_h[j] = {h_init};
            s_c[j] = {c_init};
        }}
        __syncthreads();
        for (long long t = 0; t < {T}LL; ++t) {{
            for (int q = warp; q < {4 * H}; q += {k.block // 32}) {{  // gate row q: a warp along W_hh's row
                const float* wr = {w.name} + (long long)q * {H}LL;
                float acc = 0.0f;
                for (int kk = lane; kk < {H}; kk += 32) acc = fmaf(to_f(wr[kk]), s_h[kk], acc);
                #pragma unroll
                for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
                if (lane == 0) {{
{step.take("                    ")}
                    s_g[q] = acc + {x_val};
                }}
            }}
            __syncthreads();
            for (int j = tid; j < {H}; j += {k.block}) {{  // PyTorch's gate order: input, forget, cell, output
                const float ig = 1.0f / (1.0f + expf(-s_g[j])), fg = 1.0f / (1.0f + expf(-s_g[{H} + j]));
                const float gg = tanhf(s_g[{2 * H} + j]), og = 1.0f / (1.0f + expf(-s_g[{3 * H} + j]));
                const float c = fmaf(fg, s_c[j], ig * gg);
                const float h = og * tanhf(c);
                s_c[j] = c;
                s_h[j] = h;
                out[{o_idx}] = from_f<{ot}>(h);
            }}
            __syncthreads();
        }}
    }}"""
    return f"{PRELUDE}\nextern \"C\" __global__ void __launch_bounds__({k.block}) egg_rnn({args}) {{\n{body}\n}}\n"


def grid(p: RnnPlan, k: RnnKnobs, sms: int) -> int:
    return max(1, min(p.B, sms * max(k.waves, 1)))
