"""Recurrences over time steps (nn.LSTM, nn.GRU, nn.RNN), after the GEMM that projects every step's
input (xp, with the biases that add outside the recurrence):
  LSTM: gates = xp[t] + W_hh h; i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the four quarters;
        c = f c + i g, h = o tanh(c)
  GRU:  r = sigmoid(xp_r + W_hr h + b_hr), z = sigmoid(xp_z + W_hz h + b_hz),
        n = tanh(xp_n + r (W_hn h + b_hn)), h = (1 - z) n + z h
  RNN:  h = tanh or relu(xp[t] + W_hh h)

Two kernels:
- A thread-block cluster (Hopper) per tile of the batch (`cluster` > 0): each of its C blocks keeps in
  shared memory the gate rows of H / C hidden units (all G gates of those units, so the cell update is
  local) and computes them for the whole batch tile; the new h of its units goes to every block of the
  cluster through distributed shared memory, and one cluster barrier a step orders them. W_hh is read
  from global memory once, not once a step (on the H200, the per-batch-element kernel below spent
  41 us a step of KernelBench's 6-layer LSTM re-reading 1 MB of W_hh from L2 in each of 10 blocks).
- A persistent block per batch element (`cluster` 0, any H that fits): it walks all T steps itself;
  h (and an LSTM's c) stay in shared memory between steps; each warp computes whole gate rows (its
  lanes stride along the row of W_hh, coalesced, then a shuffle sum).
Both walk from the end for the reverse direction of a bidirectional layer, and write h_t to the output
as it is made."""
from __future__ import annotations

from dataclasses import dataclass

from agents.expert.codegen import CLUSTER_PRELUDE, CTYPE, PRELUDE, Emitter
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
    col: int = 0  # where this direction's units start in a step's output row (a pair's reverse half: H)
    width: int = 0  # a step's output row: H, or 2 H for a pair (both directions' halves)

    @property
    def pair(self) -> bool:  # both directions of a bidirectional layer in one node (opgraph._recurrent)
        return bool(self.rnn.attrs.get("pair"))

    def directions(self) -> list[RnnPlan]:
        """The recurrences this node walks: itself, or a pair's forward and reverse halves (each with its own
        operands, its column of the output row)."""
        if not self.pair:
            return [self]
        r, n = self.rnn, len(self.rnn.args) // 2
        return [RnnPlan(Node(f"{r.name}_d{d}", "rnn", r.op, r.args[d * n:(d + 1) * n], r.shape, r.dtype,
                             attrs={**{k: v for k, v in r.attrs.items() if k != "pair"}, "reverse": d == 1}),
                        self.B, self.T, self.H, self.batch_first, col=d * self.H, width=2 * self.H) for d in range(2)]

    @property
    def row(self) -> int:
        return self.width or self.H

    @property
    def emits_c(self) -> bool:  # an LSTM twin that writes its cell state (for c_n) instead of h
        return self.rnn.attrs.get("emit") == "c"

    @property
    def emits_hc(self) -> bool:  # both: h's steps, then c's after them in the same buffer (opgraph._merge_cell_twins)
        return self.rnn.attrs.get("emit") == "hc"

    def store(self, at, ot: str, indent: str) -> str:
        """The step's stores of unit j (`at(width, q)` indexes step t's output row): h (or c), or h and then c a
        sequence further on."""
        q = f"{self.col} + j" if self.col else "j"
        first = f"{indent}out[{at(self.row, q)}] = from_f<{ot}>({'c' if self.emits_c else 'h'});"
        if not self.emits_hc:
            return first
        return first + f"\n{indent}out[{self.B * self.T * self.row}LL + {at(self.row, q)}] = from_f<{ot}>(c);  // the cell state's steps"

    @property
    def reverse(self) -> bool:
        return bool(self.rnn.attrs.get("reverse"))

    @property
    def cell(self) -> str:
        return self.rnn.op

    @property
    def G(self) -> int:
        return CELL_GATES[self.rnn.op]


MAX_BATCH_TILE = 16  # batch elements a cluster carries (one accumulator register each per gate row)
MAX_LANE_ROWS = 4  # gate rows a lane of the K-chunk layout (R x Bt accumulators)


@dataclass
class RnnKnobs:
    block: int = 512  # threads a block: warps share the gate rows
    waves: int = 1  # cluster 0: grid = min(B, SMs x waves), one block per batch element where they fit
    cluster: int = 0  # > 0: blocks of a cluster, each holding the gate rows of H / cluster units
    kchunk: bool = False  # a cluster's W_hh h by K chunks a warp (render_cluster's `_kchunk_products`)


@dataclass(frozen=True)
class ClusterShape:
    C: int  # blocks a cluster
    Hc: int  # hidden units a block
    Bt: int  # batch elements a cluster
    KS: int  # threads a gate row (each a strided share of its 16-byte chunks; a shuffle sum after)
    ld: int  # W_hh row pitch in shared memory: 16-byte lanes of a quarter-warp on distinct banks
    KC: int = 0  # > 0: K chunks, a warp each (every gate row, R a lane), their partial products summed after

    def rows(self, G: int) -> int:
        return G * self.Hc

    def floats(self, p: RnnPlan) -> int:  # W_hh rows, h twice (this step's and the next), gates, c, K chunks' partials
        return (self.rows(p.G) * self.ld + 2 * self.Bt * p.H + self.Bt * self.rows(p.G)
                + (self.Bt * self.Hc if p.cell == "lstm" else 0) + self.KC * self.Bt * self.rows(p.G))


def cluster_shape(p: RnnPlan, k: RnnKnobs, smem_limit: int) -> ClusterShape:
    C = k.cluster
    if C < 1 or C > 8 or p.H % C or p.H % 4 or k.block % 32 or k.block > 1024:
        raise Unsupported(f"a cluster of {C} blocks for hidden size {p.H} (H a multiple of 4 and of the cluster, at most 8)")
    Hc = p.H // C
    rows = p.G * Hc
    KS = 1
    while KS < 32 and k.block // (2 * KS) >= rows:
        KS *= 2
    ld = p.H + 4 * ((KS - p.H // 4) % 8)
    KC = 0
    if k.kchunk:  # lanes on rows 32 apart: a quarter-warp's 8 rows on distinct banks needs ld / 4 odd mod 8
        KC, ld = k.block // 32, p.H + 4 * ((1 - p.H // 4) % 8)
        if p.H % (4 * KC) or -(-rows // 32) > MAX_LANE_ROWS:
            raise Unsupported(f"W_hh h by K chunks of {p.H} over {KC} warps with {rows} gate rows a block")
    sh = ClusterShape(C, Hc, min(p.B, MAX_BATCH_TILE), KS, ld, KC)
    if sh.floats(p) * 4 > smem_limit:
        raise Unsupported(f"W_hh's rows for {Hc} units ({sh.floats(p) * 4} bytes) do not fit in a block's shared memory")
    return sh


def plan_rnn(g: OpGraph) -> RnnPlan:
    rnns = [n for n in g.nodes if n.kind == "rnn"]
    if len(rnns) != 1 or any(n.kind in ("gemm", "conv", "reduce", "scan", "pool") for n in g.nodes):
        raise Unsupported("a recurrence beside other heavy ops in one kernel")
    r = rnns[0]
    if g.output is not r:
        raise Unsupported("ops after a recurrence in the same kernel")
    shape = r.shape[1:] if r.attrs.get("emit") == "hc" else r.shape  # h's and c's steps stacked: (2, *steps)
    B, T = (shape[0], shape[1]) if r.attrs["batch_first"] else (shape[1], shape[0])
    p = RnnPlan(r, B, T, shape[2] // (2 if r.attrs.get("pair") else 1), bool(r.attrs["batch_first"]))
    if any(d.rnn.args[1].kind not in ("param", "input") for d in p.directions()):
        raise Unsupported("a computed recurrent weight")
    if (2 + p.G) * p.H * 4 > MAX_SHARED:
        raise Unsupported(f"a recurrent hidden size of {p.H} (h, c and the gates must fit in shared memory)")
    return p


def _update(p: RnnPlan, xp: dict[str, str], gate=None, c_at: str = "s_c[j]", h_prev: str = "s_h[j]") -> str:
    """The cell's pointwise step for unit j from the gate rows (W_hh h, plus xp where the gate rows
    hold it already; a GRU's xp values by gate row: `xp`): `gate(i)` is gate i's value for unit j,
    `c_at` the LSTM's cell state, `h_prev` the unit's h of the step before."""
    H = p.H
    gate = gate or (lambda i: f"s_g[{i * H} + j]" if i else "s_g[j]")
    if p.cell == "lstm":  # PyTorch's gate order: input, forget, cell, output
        return f"""                const float ig = 1.0f / (1.0f + expf(-{gate(0)})), fg = 1.0f / (1.0f + expf(-{gate(1)}));
                const float gg = tanhf({gate(2)}), og = 1.0f / (1.0f + expf(-{gate(3)}));
                const float c = fmaf(fg, {c_at}, ig * gg);
                {c_at} = c;
                const float h = og * tanhf(c);"""
    if p.cell == "gru":  # reset, update, new; xp is added here: b_hn belongs inside r * (...)
        return f"""                const float rg = 1.0f / (1.0f + expf(-({xp["j"]} + {gate(0)})));
                const float zg = 1.0f / (1.0f + expf(-({xp[f"({H} + j)"]} + {gate(1)})));
                const float ng = tanhf({xp[f"({2 * H} + j)"]} + rg * {gate(2)});
                const float h = fmaf(zg, {h_prev} - ng, ng);"""
    return f"                const float h = {f'tanhf({gate(0)})' if p.cell == 'tanh' else f'egg_max({gate(0)}, 0.0f)'};"


def _operands(g: OpGraph, p: RnnPlan):
    """(xp, W_hh, h0, c0 or None, b_hh or None, the kernel's argument list, the leaf loader)."""
    r = p.rnn
    xp, w, h0 = r.args[:3]
    c0 = r.args[3] if p.cell == "lstm" else None
    b_hh = r.args[3] if p.cell == "gru" else None
    args = ", ".join([f"{CTYPE[r.dtype]}* __restrict__ out"] +
                     [f"const {CTYPE[t.dtype]}* __restrict__ {t.name}" for t in g.inputs + g.params])
    return xp, w, h0, c0, b_hh, args, (lambda t, idx: f"to_f({t.name}[{idx}])")


def _at(p: RnnPlan):
    """at(width, q): element q of step t's row of `width` for batch element b."""
    def at(width: int, q: str) -> str:
        return f"((b * {p.T}LL + t) * {width}LL + {q})" if p.batch_first else f"((t * {p.B}LL + b) * {width}LL + {q})"
    return at


def _input_terms(p: RnnPlan, xp, b_hh, load, at):
    """What a gate row adds to W_hh h and what the update reads: (the gate rows' emitter, the term it
    adds at row q, a GRU's xp values by gate row (its emitter's statements: `upd_pre`)). An LSTM's or
    RNN's gate rows take xp[t] itself; a GRU's take b_hh, and xp comes in at the update (b_hn belongs
    inside r * (...))."""
    H, G = p.H, p.G
    gate = Emitter(load, prefix="x")
    if p.cell != "gru":
        return gate, gate.value(xp, at(G * H, "q")), {}, ""
    add = gate.value(b_hh, "q") if b_hh is not None else "0.0f"
    upd = Emitter(load, prefix="u")
    xp_at = {q: upd.value(xp, at(G * H, q)) for q in ("j", f"({H} + j)", f"({2 * H} + j)")}
    return gate, add, xp_at, upd.take("                ")


def _paired(p: RnnPlan, walks: list[str], half: str) -> str:
    """One direction's walk, or a pair's two: the grid's first `half` blocks walk forward, the rest backward
    (`blk`: a block's index within its direction's half)."""
    if len(walks) == 1:
        return walks[0]
    return (f"    const unsigned half = {half}, blk = blockIdx.x % half;  // the grid: the forward walk's blocks, then the reverse's\n"
            f"    if (blockIdx.x < half) {{\n{walks[0]}\n    }} else {{\n{walks[1]}\n    }}")


def render(g: OpGraph, p: RnnPlan, k: RnnKnobs) -> str:
    if k.block % 32 or k.block > 1024:
        raise Unsupported("rnn block shape")
    H, G = p.H, p.G
    c_decl = f", s_c[{H}]" if p.cell == "lstm" else ""
    dirs = p.directions()
    blk, nblk = ("blockIdx.x", "gridDim.x") if len(dirs) == 1 else ("blk", "half")
    walks = [_walk(g, d, k, blk, nblk) for d in dirs]
    body = f"""    __shared__ float s_h[{H}], s_g[{G * H}]{c_decl};
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
{_paired(p, walks, "gridDim.x / 2")}"""
    args = _operands(g, p)[5]
    return f"{PRELUDE}\nextern \"C\" __global__ void __launch_bounds__({k.block}) egg_rnn({args}) {{\n{body}\n}}\n"


def _walk(g: OpGraph, p: RnnPlan, k: RnnKnobs, blk: str, nblk: str) -> str:
    """A persistent block's walk over the steps of its batch elements (`blk` of `nblk` blocks)."""
    B, T, H, G = p.B, p.T, p.H, p.G
    xp, w, h0, c0, b_hh, _, load = _operands(g, p)
    at = _at(p)
    init = Emitter(load, prefix="s")
    state = f"            s_h[j] = {init.value(h0, f'(b * {H}LL + j)')};"
    if c0 is not None:
        state += f"\n            s_c[j] = {init.value(c0, f'(b * {H}LL + j)')};"
    gate, add, xp_at, upd_pre = _input_terms(p, xp, b_hh, load, at)
    update = _update(p, xp_at)
    ot = CTYPE[p.rnn.dtype]
    return f"""    for (long long b = {blk}; b < {B}LL; b += {nblk}) {{
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
{p.store(at, ot, "                ")}
            }}
            __syncthreads();
        }}
    }}"""


def render_cluster(g: OpGraph, p: RnnPlan, k: RnnKnobs, sh: ClusterShape) -> str:
    H, Bt, rows, ld = p.H, sh.Bt, sh.rows(p.G), sh.ld
    dirs = p.directions()
    walks = [_cluster_walk(g, d, k, sh, "blockIdx.x" if len(dirs) == 1 else "blk") for d in dirs]
    body = f"""    extern __shared__ __align__(16) unsigned char smem[];  // the type the GEMMs of a program declare it with
    float* s_w = reinterpret_cast<float*>(smem);  // [G x Hc][ld]: W_hh's rows of this block's units, gate by gate
    float* s_h = s_w + {rows * ld};  // [2][Bt][H]: h of the batch tile, this step's and the next
    float* s_g = s_h + {2 * Bt * H};  // [Bt][G x Hc]: this step's gate rows
    float* s_c = s_g + {Bt * rows};  // [Bt][Hc]: an LSTM's cell state of this block's units
    float* s_p = s_c + {Bt * sh.Hc if p.cell == "lstm" else 0};  // [KC][Bt][G x Hc]: K chunks' partial products
    (void)s_c; (void)s_p;
    const int tid = threadIdx.x;
    const unsigned rank = cluster_rank();
{_paired(p, walks, "gridDim.x / 2")}"""
    return (f"{PRELUDE}{CLUSTER_PRELUDE}\nextern \"C\" __global__ void __cluster_dims__({sh.C}, 1, 1) "
            f"__launch_bounds__({k.block}) egg_rnn({_operands(g, p)[5]}) {{\n{body}\n}}\n")


def _cluster_walk(g: OpGraph, p: RnnPlan, k: RnnKnobs, sh: ClusterShape, blk: str) -> str:
    """A cluster's walk over the steps of its batch tile (the `blk`-th block of its direction's grid)."""
    r, B, T, H, G = p.rnn, p.B, p.T, p.H, p.G
    C, Hc, Bt, KS, ld = sh.C, sh.Hc, sh.Bt, sh.KS, sh.ld
    rows, NT = sh.rows(G), k.block
    per = NT // KS  # gate rows a pass
    PF = -(-Bt * rows // NT)  # input terms a thread prefetches
    xp, w, h0, c0, b_hh, args, load = _operands(g, p)
    at = _at(p)
    ih = Emitter(load, prefix="ih")
    hv = ih.value(h0, f"(b * {H}LL + jj)")
    init = f"""    for (int e = tid; e < {Bt * H}; e += {NT}) {{  // h0 of the batch tile, every unit
        const int bl = e / {H}, jj = e % {H};
        const long long b = b0 + bl;
        float v = 0.0f;
        if (b < {B}LL) {{
{ih.take("            ")}
            v = {hv};
        }}
        s_h[e] = v;
    }}"""
    if c0 is not None:
        ic = Emitter(load, prefix="ic")
        cv = ic.value(c0, f"(b * {H}LL + j)")
        init += f"""
    for (int e = tid; e < {Bt * Hc}; e += {NT}) {{  // c0 of this block's units
        const int bl = e / {Hc};
        const long long b = b0 + bl, j = rank * {Hc}LL + e % {Hc};
        float v = 0.0f;
        if (b < {B}LL) {{
{ic.take("            ")}
            v = {cv};
        }}
        s_c[e] = v;
    }}"""
    gate, add, xp_at, upd_pre = _input_terms(p, xp, b_hh, load, at)
    update = _update(p, xp_at, gate=lambda i: f"s_g[bl * {rows} + {i * Hc} + jl]", c_at="s_c[e]",
                     h_prev=f"hb[bl * {H} + j]")
    ot = CTYPE[r.dtype]
    shuffle = (f"""            #pragma unroll
            for (int bl = 0; bl < {Bt}; ++bl)
                #pragma unroll
                for (int s = {KS // 2}; s > 0; s >>= 1) acc[bl] += __shfl_xor_sync(0xffffffffu, acc[bl], s);
""" if KS > 1 else "")
    products = _kchunk_products(p, sh, NT, PF) if sh.KC else f"""\
        for (int base = 0; base < {rows}; base += {per}) {{  // whole warps a pass: the shuffles stay uniform
            const int lr = base + tid / {KS}, kp = tid % {KS};
            const bool mine = lr < {rows};
            float acc[{Bt}];
            #pragma unroll
            for (int bl = 0; bl < {Bt}; ++bl) acc[bl] = 0.0f;
            if (mine) {{
                const float* wr = s_w + lr * {ld};
                for (int kk = 4 * kp; kk < {H}; kk += {4 * KS}) {{
                    const float4 wv = *reinterpret_cast<const float4*>(wr + kk);
                    #pragma unroll
                    for (int bl = 0; bl < {Bt}; ++bl) {{
                        const float4 hv = *reinterpret_cast<const float4*>(hb + bl * {H} + kk);
                        acc[bl] = fmaf(wv.x, hv.x, fmaf(wv.y, hv.y, fmaf(wv.z, hv.z, fmaf(wv.w, hv.w, acc[bl]))));
                    }}
                }}
            }}
{shuffle}            if (mine && kp == 0) {{
                #pragma unroll
                for (int bl = 0; bl < {Bt}; ++bl) s_g[bl * {rows} + lr] = acc[bl];
            }}
        }}
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < {PF}; ++i)
            if (tid + i * {NT} < {Bt * rows}) s_g[tid + i * {NT}] += pre[i];
        __syncthreads();
"""
    return f"""    const long long b0 = (long long)({blk} / {C}) * {Bt};
    for (int e = tid; e < {rows * H}; e += {NT}) {{
        const int lr = e / {H}, kk = e % {H};
        s_w[lr * {ld} + kk] = to_f({w.name}[((long long)(lr / {Hc}) * {H} + rank * {Hc} + lr % {Hc}) * {H}LL + kk]);
    }}
{init}
    cluster_sync();  // every block has started (and loaded its h0) before any writes into another
    for (long long s_t = 0; s_t < {T}LL; ++s_t) {{
        const long long t = {f"{T - 1}LL - s_t" if p.reverse else "s_t"};
        const float* hb = s_h + (s_t & 1) * {Bt * H};
        float* hn = s_h + ((s_t + 1) & 1) * {Bt * H};
        float pre[{PF}];  // this step's input terms (xp, or a GRU's b_hh), loaded ahead of the products
        #pragma unroll
        for (int i = 0; i < {PF}; ++i) {{
            const int e = tid + i * {NT}, bl = e / {rows}, lr = e % {rows};
            const long long b = b0 + bl, q = (long long)(lr / {Hc}) * {H} + rank * {Hc} + lr % {Hc};  // gate row of W_hh (column of xp)
            pre[i] = 0.0f;
            if (e < {Bt * rows} && b < {B}LL) {{
{gate.take("                ")}
                pre[i] = {add};
            }}
        }}
{products}        for (int e = tid; e < {Bt * Hc}; e += {NT}) {{  // the cell update of this block's units
            const int bl = e / {Hc}, jl = e % {Hc};
            const long long b = b0 + bl, j = rank * {Hc}LL + jl;
            if (b < {B}LL) {{
{upd_pre}
{update}
                #pragma unroll
                for (unsigned rk = 0; rk < {C}u; ++rk) cluster_map(hn, rk)[bl * {H} + j] = h;  // to every block
{p.store(at, ot, "                ")}
            }}
        }}
        cluster_sync();  // the next h is everywhere, and this step's h is read by all before it is overwritten
    }}"""


def _kchunk_products(p: RnnPlan, sh: ClusterShape, NT: int, PF: int) -> str:
    """This step's gate rows, W_hh h + the input terms, into s_g, by K chunks: warp w multiplies K range
    [w KCH, (w + 1) KCH) for every gate row of the block, lane l rows l, l + 32, ... (R of them) for the whole batch
    tile, so each 16-byte load of h (the same address across the warp) feeds R x 4 FMAs and each of W_hh's feeds
    Bt x 4 (the layout above: a gate row's lanes on strided chunks, one row a lane, fed 4 FMAs a load of h, and
    shared memory returns one register a lane a cycle: on the H100 KernelBench's LSTM steps took 7.8 us, about
    what its 176 16-byte loads a thread a step take); the chunks' partials summed in order with the input terms
    (`pre`: PF of them a thread, prefetched by the walk)."""
    H, G, Bt, KC = p.H, p.G, sh.Bt, sh.KC
    rows, KCH = sh.rows(G), p.H // sh.KC
    R = -(-rows // 32)
    guard = (lambda r: "") if rows % 32 == 0 else (lambda r: f"if (lane + {32 * r} < {rows}) ")
    loads = "\n".join(f"                {guard(r)}wv[{r}] = *reinterpret_cast<const float4*>(s_w + (lane + {32 * r}) * {sh.ld} + kk);"
                      for r in range(R))
    fmas = "\n".join(f"                    acc[{r}][bl] = fmaf(wv[{r}].x, hv.x, fmaf(wv[{r}].y, hv.y, fmaf(wv[{r}].z, hv.z, "
                     f"fmaf(wv[{r}].w, hv.w, acc[{r}][bl]))));" for r in range(R))
    stores = "\n".join(f"                {guard(r)}s_p[(kc * {Bt} + bl) * {rows} + lane + {32 * r}] = acc[{r}][bl];" for r in range(R))
    return f"""        {{  // W_hh h by K chunks: warp kc its chunk of every gate row, lane l rows l + 32 r
            const int lane = tid & 31, kc = tid >> 5;
            float acc[{R}][{Bt}];
            #pragma unroll
            for (int r = 0; r < {R}; ++r)
                #pragma unroll
                for (int bl = 0; bl < {Bt}; ++bl) acc[r][bl] = 0.0f;
            #pragma unroll
            for (int k4 = 0; k4 < {KCH}; k4 += 4) {{
                const int kk = kc * {KCH} + k4;
                float4 wv[{R}] = {{}};
{loads}
                #pragma unroll
                for (int bl = 0; bl < {Bt}; ++bl) {{
                    const float4 hv = *reinterpret_cast<const float4*>(hb + bl * {H} + kk);
{fmas}
                }}
            }}
            #pragma unroll
            for (int bl = 0; bl < {Bt}; ++bl) {{
{stores}
            }}
        }}
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < {PF}; ++i) {{  // the chunks' partials in order, after the input term
            const int e = tid + i * {NT};
            if (e < {Bt * rows}) {{
                float v = pre[i];
                #pragma unroll
                for (int c = 0; c < {KC}; ++c) v += s_p[c * {Bt * rows} + e];
                s_g[e] = v;
            }}
        }}
        __syncthreads();
"""


def grid(p: RnnPlan, k: RnnKnobs, sms: int) -> int:
    """A cluster per batch tile, or a block per batch element up to SMs x waves; a pair twice that."""
    if k.cluster:
        return len(p.directions()) * k.cluster * -(-p.B // min(p.B, MAX_BATCH_TILE))
    return len(p.directions()) * max(1, min(p.B, sms * max(k.waves, 1)))
