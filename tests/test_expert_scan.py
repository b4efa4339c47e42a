"""The scan family on the CPU: cumsum/cumprod lowered with their dim, flip-cumsum-flip recognised as a
reverse scan, the pointwise chain before a scan fused (a masked cumsum), and every variant compiles for
sm_90a. (Correctness is the GPU's to show: `egg bench` verifies each against a float64 truth.)"""
import pytest

from agents.expert import ExpertAgent
from agents.expert.opgraph import export_graph
from agents.expert.templates import scan
from runtime.compile import compile_check
from tasks import load_task
from tests.support import stage_kernels

TEMPLATE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, {args}):
        return {expr}
def get_inputs():
    return [{inputs}]
def get_init_inputs():
    return []
"""


def task(tmp_path, name, expr, args="x", inputs="torch.rand(8, 1000)"):
    p = tmp_path / f"{name}.py"
    p.write_text(TEMPLATE.format(args=args, expr=expr, inputs=inputs))
    return p


@pytest.mark.parametrize("name,expr,args,inputs,op,reverse,outer,L,inner", [
    ("cumsum", "torch.cumsum(x, dim=1)", "x", "torch.rand(8, 1000)", "cumsum", False, 8, 1000, 1),
    ("cumprod0", "torch.cumprod(x, dim=0)", "x", "torch.rand(64, 33)", "cumprod", False, 1, 64, 33),
    ("reverse", "torch.cumsum(x.flip(1), dim=1).flip(1)", "x", "torch.rand(8, 1000)", "cumsum", True, 8, 1000, 1),
    ("masked", "torch.cumsum(x * mask, dim=1) * 2.0", "x, mask",
     "torch.rand(8, 1000), torch.randint(0, 2, (8, 1000)).bool()", "cumsum", False, 8, 1000, 1),
    ("middle", "torch.cumsum(x, dim=1)", "x", "torch.rand(4, 50, 6)", "cumsum", False, 4, 50, 6),
])
def test_scan_lowering_and_compile(tmp_egg, name, expr, args, inputs, op, reverse, outer, L, inner):
    p = task(tmp_egg, name, expr, args, inputs)
    g = export_graph(load_task(p))
    plan = scan.plan_scan(g)
    assert (plan.scan.op, plan.scan.reverse, plan.outer, plan.L, plan.inner) == (op, reverse, outer, L, inner)
    kernels = stage_kernels(ExpertAgent(), p)
    for k in kernels:
        r = compile_check(k.cuda_source, k.compile_options, "sm_90a")
        assert r.ok, (k.params, r.errors)
        assert r.resources[0].spill_store_bytes == 0
    assert len(kernels) >= 4


def test_what_scans_still_cannot_do(tmp_egg):
    flip_only = task(tmp_egg, "fliponly", "torch.cumsum(x.flip(1), dim=1)")  # not the reverse-scan pattern
    assert ExpertAgent().precheck(str(flip_only))


def test_a_scan_of_a_strided_slice_reads_through_it(tmp_egg):
    """x[:, ::2] is an index map (it used to be declined): the scan reads every other element in place."""
    from hardware_profiles import load_profile
    from tests import cpu_emulator
    p = task(tmp_egg, "stepped", "torch.cumsum(x[:, ::2], dim=1) * 2.0", inputs="torch.randn(8, 1001)")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    assert fam == "scan" and plan.L == 501
    if not cpu_emulator.available():
        pytest.skip("no g++")
    k = agent.emit(g, fam, plan, agent._default(fam, g, plan, None), load_profile("h200"))
    err, eager_err = cpu_emulator.run_module(p, g, k, tmp_egg / "emu")
    assert err < 32 * max(eager_err, 2 ** -24), (err, eager_err)


EXCL = ("torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), "
        "torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)")


def test_exclusive_scan_is_one_scan(tmp_egg):
    """KernelBench 92's cat(zeros, cumsum(x[:, :-1])) is x's exclusive scan: one kernel, no shifted copy."""
    g = export_graph(load_task(task(tmp_egg, "excl", EXCL)))
    assert [(n.kind, n.op, n.attrs.get("exclusive")) for n in g.nodes if n.kind != "input"] == [("scan", "cumsum", True)]


@pytest.mark.parametrize("name,expr,args,shape,params", [
    ("cumsum", "torch.cumsum(x, dim=1)", "x", (3, 1000), {"block": 64, "items": 4}),
    ("cumsum_tiles", "torch.cumsum(x, dim=1)", "x", (2, 2500), {"block": 128, "items": 8}),
    ("cumprod", "torch.cumprod(x, dim=1)", "x", (2, 300), {"block": 64, "items": 2}),
    ("reverse", "torch.cumsum(x.flip(1), dim=1).flip(1)", "x", (3, 777), {"block": 96, "items": 4}),
    ("masked", "torch.cumsum(x * mask, dim=1) * 2.0", "x, mask", (2, 513), {"block": 64, "items": 8}),
    ("columns", "torch.cumsum(x, dim=1)", "x", (3, 50, 7), {"block": 32, "items": 8}),
    ("exclusive", EXCL, "x", (3, 700), {"block": 64, "items": 4}),
    ("exclusive_columns", EXCL, "x", (3, 40, 5), {"block": 32, "items": 8}),
    ("exclusive_prod", EXCL.replace("zeros_like", "ones_like").replace("cumsum", "cumprod"), "x", (2, 300),
     {"block": 64, "items": 2}),
    ("narrowed", "torch.cumsum(x.narrow(1, 3, 500), dim=1)", "x", (2, 600), {"block": 64, "items": 4}),  # a sliced input
])
def test_scan_matches_torch_on_the_cpu(tmp_egg, name, expr, args, shape, params):
    """The generated kernel run as C++ with real threads, barriers and warp shuffles (tests/cpu_emulator.py)."""
    import torch

    from tests import cpu_emulator
    if not cpu_emulator.available():
        pytest.skip("no g++")
    inputs = "torch.rand" + str(tuple(shape)) + (", torch.randint(0, 2, " + str(tuple(shape)) + ").bool()" if "mask" in args else "")
    p = task(tmp_egg, name, expr, args, inputs)
    loaded = load_task(p)
    g = export_graph(loaded)
    plan = scan.plan_scan(g)
    k = scan.ScanKnobs(block=params["block"], items=params["items"], waves=1)
    src = scan.render(g, plan, k)
    torch.manual_seed(1)
    xs = [torch.rand(*shape) * (1.0 if "prod" not in name else 1.9)]
    if "mask" in args:
        xs.append(torch.randint(0, 2, shape).bool())
    want = loaded.make_model(42)(*xs)
    got = cpu_emulator.run(src, "egg_scan", scan.grid(plan, k, 2, 1024), k.block, tuple(want.shape), xs, tmp_egg / "emu")
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
