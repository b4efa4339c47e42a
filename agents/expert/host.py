"""Host code for expert kernels: a ModelNew whose forward checks shapes, allocates the output
through `egg.empty` and launches one kernel on torch's current stream."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from agents.expert.opgraph import Node, OpGraph, is_draw


@dataclass(frozen=True)
class TensorMap:
    """A kernel's TMA descriptor argument: `node`'s `elem`-byte elements from `offset` on as a tensor of
    `dims` (innermost first), read in boxes of `box` (egg.tmap)."""
    node: Node
    dims: tuple
    box: tuple
    offset: int = 0
    elem: int = 2
    strides: tuple | None = None  # bytes between consecutive entries of dims 1..; None: contiguous


@dataclass
class Launch:
    kernel: str
    grid: tuple
    block: tuple
    tensors: list  # Node order of the kernel's tensor arguments after `out`
    shared_mem: int
    align16: bool = False
    maps: list = field(default_factory=list)  # TensorMap arguments, passed before `out`
    offset: int = -1  # >= 0: `out` is this element of its node's tensor on (a slice of a concatenation several
    # launches write), allocated by the first such launch


def _args(launch: Launch, out: str, names: dict[str, str]) -> str:
    maps = [f"egg.tmap({names[m.node.name]}, {tuple(m.dims)!r}, {tuple(m.box)!r}, {m.offset}"
            + (f", {m.elem}, {tuple(m.strides)!r})" if m.strides else f"{'' if m.elem == 2 else f', {m.elem}'})")
            for m in launch.maps]
    return ", ".join(maps + [out] + [names[t.name] for t in launch.tensors])


def leaves(g: OpGraph) -> list[Node]:
    return g.inputs + g.params


def _host_names(g: OpGraph) -> dict[str, str]:
    """How forward names each leaf tensor: inputs by position, parameters as buffers on self."""
    names = {n.name: f"x{n.index}" for n in g.inputs}
    names.update({n.name: f"self.p{n.index}" for n in g.params})
    return names


def _given(g: OpGraph) -> list[Node]:
    """The inputs forward takes (a draw is no argument: the host code asks egg.draw for it)."""
    return [n for n in g.inputs if not is_draw(n)]


def _device(g: OpGraph) -> str:
    given = _given(g)
    return f"x{given[0].index}.device" if given else "'cuda'"


def module_source(g: OpGraph, launch: Launch) -> str:
    names = _host_names(g)
    pmap = {n.target: f"p{n.index}" for n in g.params}
    lines = ["class ModelNew(nn.Module):",
             f"    PARAM_MAP = {pmap!r}  # reference parameter/buffer name -> attribute here",
             "", "    def __init__(self, *init_inputs):", "        super().__init__()"]
    for p in g.params:
        lines.append(f"        self.register_buffer('p{p.index}', torch.empty({tuple(p.shape)!r}, "
                     f"dtype=torch.{p.dtype}))")
    given = _given(g)
    slots = sorted([(n.index, f"x{n.index}") for n in given] + [(i, f"s{i}") for i, _ in g.scalars])
    args = ", ".join(name for _, name in slots)
    lines += ["", f"    def forward(self, {args}):"]
    for i, v in g.scalars:
        lines += [f"        if s{i} != {v!r}:",
                  f"            raise ValueError('kernel specialised for input {i} = {v!r}, got %r' % (s{i},))"]
    for n in given:
        lines += [f"        if tuple(x{n.index}.shape) != {tuple(n.shape)!r} or x{n.index}.dtype != torch.{n.dtype}:",
                  f"            raise ValueError('kernel specialised for input {n.index} of shape {tuple(n.shape)} "
                  f"{n.dtype}, got %s %s' % (tuple(x{n.index}.shape), x{n.index}.dtype))",
                  f"        x{n.index} = x{n.index}.contiguous()"]
    dev = _device(g)
    for n in g.inputs:  # the reference's draws, in its order (runtime/draws.py)
        if is_draw(n):
            p = f", {n.attrs['p']!r}" if "p" in n.attrs else ""
            lines.append(f"        x{n.index} = egg.draw({n.attrs['draw']!r}, {tuple(n.shape)!r}, torch.{n.dtype}, {dev}{p})")
    if launch.align16:
        for n in given:
            lines.append(f"        assert x{n.index}.data_ptr() % 16 == 0")
    out = g.output
    lines.append(f"        out = egg.empty({tuple(out.shape)!r}, torch.{out.dtype}, {dev})")
    targs = _args(launch, "out", names)
    lines.append(f"        egg.launch({launch.kernel!r}, {launch.grid!r}, {launch.block!r}, [{targs}], "
                 f"shared_mem={launch.shared_mem})")
    lines.append("        return out")
    return "\n".join(lines) + "\n"


def module_source_program(g: OpGraph, steps: list[tuple[Launch, Node]], graph: bool = False,
                          views: dict[str, tuple[int, int]] | None = None) -> str:
    """Host code for kernels launched in order, each writing the tensor of its node (the last one the
    task's output); a later kernel reads an earlier one's tensor by that node's name. With `graph`,
    forward checks its inputs and hands the launches (method `run_kernels`) to `egg.graphed`, which replays
    them as one CUDA graph. `views` (name -> (input position, element offset)): slices of an input a
    kernel reads as a tensor of its own, passed as views (`x0.view(-1)[off:]`: no copy, no kernel)."""
    # the inputs asserted 16-byte aligned where any launch reads one 16 bytes at a time (a later stage's too)
    head = module_source(g, replace(steps[0][0], tensors=[], maps=[], align16=any(ln.align16 for ln, _ in steps)))
    head = head.rsplit("        out = egg.empty", 1)[0]
    names = _host_names(g)
    dev = _device(g)
    lines = []
    static, params = weight_launches(g, steps), {n.name for n in g.params}
    if static:  # their outputs are buffers of the module, written by `stage_params` once per version of the weights
        init, stage, reads = [], ["", "    def stage_params(self):"], {}
        for i in static:
            launch, node = steps[i]
            init.append(f"        self.register_buffer('s{i}', torch.empty({tuple(node.shape)!r}, dtype=torch.{node.dtype}), "
                        "persistent=False)")
            names[node.name] = f"self.s{i}"
            reads.update({names[t.name]: None for t in launch.tensors + [m.node for m in launch.maps]
                          if t.name in params})  # (the weights: a module moved moves them too)
            stage.append(f"        egg.launch({launch.kernel!r}, {launch.grid!r}, {launch.block!r}, "
                         f"[{_args(launch, f'self.s{i}', names)}], shared_mem={launch.shared_mem})")
        at = head.index("\n\n    def forward(")  # (before forward: the launches in the order they first run)
        head = head[:at] + "\n" + "\n".join(init + stage) + head[at:]
        lines.append(f"        egg.staged(self, self.stage_params, [{', '.join(reads)}])")
    if graph:
        xs = ", ".join(f"x{n.index}" for n in g.inputs)
        lines += [f"        return egg.graphed(self, self.run_kernels, [{xs}])", "", f"    def run_kernels(self, {xs}):"]
    for name, (pos, off) in sorted((views or {}).items(), key=lambda kv: kv[1]):
        names[name] = f"x{pos}.view(-1)[{off}:]"
    final = steps[-1][1].name
    for i, (launch, node) in enumerate(steps):  # the output is "out" (several launches may write slices of it)
        if i in static:
            continue
        var = "out" if i == len(steps) - 1 or (launch.offset >= 0 and node.name == final) else f"t{i}"
        if launch.offset >= 0 and node.name in names:  # a slice of a tensor an earlier launch allocated
            var = names[node.name]
        else:
            lines.append(f"        {var} = egg.empty({tuple(node.shape)!r}, torch.{node.dtype}, {dev})")
        targs = _args(launch, f"{var}.view(-1)[{launch.offset}:]" if launch.offset > 0 else var, names)
        lines.append(f"        egg.launch({launch.kernel!r}, {launch.grid!r}, {launch.block!r}, [{targs}], "
                     f"shared_mem={launch.shared_mem})")
        names[node.name] = var
    lines.append("        return out")
    return head + "\n".join(lines) + "\n"


def weight_launches(g: OpGraph, steps: list[tuple[Launch, Node]]) -> list[int]:
    """The launches (by position) that read only the model's parameters and buffers, or what such launches wrote: a
    conv weight staged channels last, Swin V2's position-bias MLP. Never the last (the output) nor one writing a slice
    of a tensor others write."""
    params, found, out = {n.name for n in g.params}, set(), []
    for i, (launch, node) in enumerate(steps[:-1]):
        reads = [t.name for t in launch.tensors] + [m.node.name for m in launch.maps]
        if launch.offset < 0 and reads and all(r in params or r in found for r in reads):
            found.add(node.name)
            out.append(i)
    return out
