"""Recurrences over time steps (nn.LSTM, nn.GRU, nn.RNN), after the GEMM that projects every step's
input (xp, with the biases that add outside the recurrence):
  LSTM: gates = xp[t] + W_hh h; i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the four quarters;
        c = f c + i g, h = o tanh(c)
  GRU:  r = sigmoid(xp_r + W_hr h + b_hr), z = sigmoid(xp_z + W_hz h + b_hz),
        n = tanh(xp_n + r (W_hn h + b_hn)), h = (1 - z) n + z h
  RNN:  h = tanh or relu(xp[t] + W_hh h)

A persistent block per batch element walks all T steps itself (from the end for the reverse direction
of a bidirectional layer): batch elements never exchange state,
so no grid-wide barrier is needed. h (and an LSTM's c) stay in shared memory between steps; each warp
computes whole gate rows (its lanes stride along the row of W_hh, coalesced, then a shuffle sum), so
W_hh is read from L2 once a step by each block. h_t is written to the output as it is made."""
from __future__ import annotations

from dataclasses import dataclass

from agents.expert.codegen import CTYPE, PRELUDE, Emitter
from agents.expert.opgraph import GATES, Node, OpGraph, Unsupported

MAX_SHARED = 48 * 1024  # static shared memory: h, c and the gates
CELL_GATES = {"lstm": GATES["lstm"], "gru": GATES["gru"], "tanh": 1, "relu": 1}


@dataclass
class RnnPlan:
    rnn: Node
    B: int
    T: int
    H: int
    batch_first: bool

    @property
    def emits_c(self) -> bool:  # an LSTM twin that writes its cell state (for c_n) instead of h
        return self.rnn.attrs.get("emit") == "c"

    @property
    def reverse(self) -> bool:
        return bool(self.rnn.attrs.get("reverse"))

    @property
    def cell(self) -> str:
        return self.rnn.op

    @property
    def G(self) -> int:
        return CELL_GATES[self.rnn.op]


@dataclass
class RnnKnobs:
    block: int = 512  # threads a batch element: warps share the gate rows
    waves: int = 1  # grid = min(B, SMs x waves): one block per batch element where they fit


def plan_rnn(g: OpGraph) -> RnnPlan:
    rnns = [n for n in g.nodes if n.kind == "rnn"]
    if len(rnns) != 1 or any(n.kind in ("gemm", "conv", "reduce", "scan", "pool") for n in g.nodes):
        raise Unsupported("a recurrence beside other heavy ops in one kernel")
    r = rnns[0]
    if g.output is not r:
        raise Unsupported("ops after a recurrence in the same kernel")
    if r.args[1].kind not in ("param", "input"):
        raise Unsupported("a computed recurrent weight")
    B, T = (r.shape[0], r.shape[1]) if r.attrs["batch_first"] else (r.shape[1], r.shape[0])
    H = r.shape[2]
    p = RnnPlan(r, B, T, H, bool(r.attrs["batch_first"]))
    if (2 + p.G) * H * 4 > MAX_SHARED:
        raise Unsupported(f"a recurrent hidden size of {H} (h, c and the gates must fit in shared memory)")
    return p


def _update(p: RnnPlan, xp: dict[str, str]) -> str:
    """The cell's pointwise step for unit j from the gate rows s_g (W_hh h, plus xp where the gate rows
    hold it already; a GRU's xp values by gate row: `xp`)."""
    H = p.H
    if p.cell == "lstm":  # PyTorch's gate order: input, forget, cell, output
        return f"""                const float ig = 1.0f / (1.0f + expf(-s_g[j])), fg = 1.0f / (1.0f + expf(-s_g[{H} + j]));
                const float gg = tanhf(s_g[{2 * H} + j]), og = 1.0f / (1.0f + expf(-s_g[{3 * H} + j]));
                const float c = fmaf(fg, s_c[j], ig * gg);
                s_c[j] = c;
                const float h = og * tanhf(c);"""
    if p.cell == "gru":  # reset, update, new; xp is added here: b_hn belongs inside r * (...)
        return f"""                const float rg = 1.0f / (1.0f + expf(-({xp["j"]} + s_g[j])));
                const float zg = 1.0f / (1.0f + expf(-({xp[f"({H} + j)"]} + s_g[{H} + j])));
                const float ng = tanhf({xp[f"({2 * H} + j)"]} + rg * s_g[{2 * H} + j]);
                const float h = fmaf(zg, s_h[j] - ng, ng);"""
    return f"                const float h = {'tanhf(s_g[j])' if p.cell == 'tanh' else 'fmaxf(s_g[j], 0.0f)'};"


def render(g: OpGraph, p: RnnPlan, k: RnnKnobs) -> str:
    if k.block % 32 or k.block > 1024:
        raise Unsupported("rnn block shape")
    r, B, T, H, G = p.rnn, p.B, p.T, p.H, p.G
    xp, w, h0 = r.args[:3]
    c0 = r.args[3] if p.cell == "lstm" else None
    b_hh = r.args[3] if p.cell == "gru" else None
    tensors = g.inputs + g.params
    args = ", ".join([f"{CTYPE[r.dtype]}* __restrict__ out"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in tensors])
    load = lambda t, idx: f"to_f({t.name}[{idx}])"  # noqa: E731
    init = Emitter(load, prefix="s")
    state = f"            s_h[j] = {init.value(h0, f'(b * {H}LL + j)')};"
    if c0 is not None:
        state += f"\n            s_c[j] = {init.value(c0, f'(b * {H}LL + j)')};"

    def at(width: int, q: str) -> str:  # element q of step t's row of `width` for batch element b
        return f"((b * {T}LL + t) * {width}LL + {q})" if p.batch_first else f"((t * {B}LL + b) * {width}LL + {q})"
    gate = Emitter(load, prefix="x")
    if p.cell == "gru":  # the gate rows are W_hh h + b_hh; xp comes in at the update
        add = gate.value(b_hh, "q") if b_hh is not None else "0.0f"
        upd = Emitter(load, prefix="u")
        xp_at = {q: upd.value(xp, at(G * H, q)) for q in ("j", f"({H} + j)", f"({2 * H} + j)")}
        update = _update(p, xp_at)
        upd_pre = upd.take("                ")
    else:
        add = gate.value(xp, at(G * H, "q"))
        update, upd_pre = _update(p, {}), ""
    ot = CTYPE[r.dtype]
    c_decl = f", s_c[{H}]" if p.cell == "lstm" else ""
    body = f"""    __shared__ float s_h[{H}], s_g[{G * H}]{c_decl};
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (long long b = blockIdx.x; b < {B}LL; b += gridDim.x) {{
        for (int j = tid; j < {H}; j += {k.block}) {{
{init.take("            ")}
{state}
        }}
        __syncthreads();
        for (long long s_t = 0; s_t < {T}LL; ++s_t) {{
            const long long t = {f"{T - 1}LL - s_t" if p.reverse else "s_t"};  // a reverse direction walks back
            for (int q = warp; q < {G * H}; q += {k.block // 32}) {{  // gate row q: a warp along W_hh's row
                const float* wr = {w.name} + (long long)q * {H}LL;
                float acc = 0.0f;
                for (int kk = lane; kk < {H}; kk += 32) acc = fmaf(to_f(wr[kk]), s_h[kk], acc);
                #pragma unroll
                for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
                if (lane == 0) {{
{gate.take("                    ")}
                    s_g[q] = acc + {add};
                }}
            }}
            __syncthreads();
            for (int j = tid; j < {H}; j += {k.block}) {{
{upd_pre}
{update}
                s_h[j] = h;
                out[{at(H, "j")}] = from_f<{ot}>({"c" if p.emits_c else "h"});
            }}
            __syncthreads();
        }}
    }}"""
    return f"{PRELUDE}\nextern \"C\" __global__ void __launch_bounds__({k.block}) egg_rnn({args}) {{\n{body}\n}}\n"


def grid(p: RnnPlan, k: RnnKnobs, sms: int) -> int:
    return max(1, min(p.B, sms * max(k.waves, 1)))
