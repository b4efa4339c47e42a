"""A matmul only summed over its columns (level 2 tasks 14 and 18) becomes the weight's column sums and a
matrix-vector product: planned, compiled for sm_90a, and run on the CPU emulator against float64."""
import pytest

from agents.expert import ExpertAgent
from agents.expert.templates import gemm_sum
from runtime.compile import compile_check
from tests.test_expert_program import TEMPLATE


CASES = [
    # task 14 in miniature: x @ W.T (W stored (N, K)), divided, summed with keepdim, scaled; K % 4 == 0: 16-byte reads
    ("self.w = nn.Parameter(torch.randn(40, 24))",
     "return torch.sum(torch.matmul(x, self.w.T) / 2, dim=1, keepdim=True) * 1.5", "6, 24", "nk", True),
    # task 18: nn.Linear with a bias, then reductions over a dim of one element (values themselves) and log-sum-exps
    ("self.lin = nn.Linear(24, 40)",
     "y = torch.sum(self.lin(x), dim=1, keepdim=True)\n        y = torch.max(y, dim=1, keepdim=True)[0]\n"
     "        return torch.logsumexp(torch.mean(y, dim=1, keepdim=True), dim=1, keepdim=True)", "9, 24", "nk", True),
    # row-major B (K, N) with odd sizes (scalar reads), negated, a mean (a sum, then a division), no keepdim
    ("self.w = nn.Parameter(torch.randn(23, 37))", "return torch.tanh(-torch.mean(x @ self.w, dim=1)) + 0.25", "5, 23", "kn", False),
    # a 3-d input to nn.Linear (rows merged), odd K, no bias, a sum over the last dim
    ("self.lin = nn.Linear(21, 16, bias=False)", "return torch.sum(self.lin(x) * -0.5, dim=-1)", "2, 3, 21", "nk", False),
]


def _task(tmp, init, body, shape):
    p = tmp / "t.py"
    p.write_text(TEMPLATE.format(init=init, body=body, shape=shape))
    return p


@pytest.mark.parametrize("init,body,shape,layout,vec", CASES)
def test_a_matmul_only_summed_over_its_columns_is_a_matrix_vector_product(tmp_egg, init, body, shape, layout, vec):
    from tests import cpu_emulator
    from tests.test_expert import request
    path = _task(tmp_egg, init, body, shape)
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path))
    assert fam == "gemm_sum" and plan.gemm.b_layout == layout and plan.vec_a == vec
    pk = agent.propose(request(path)).kernels[0]
    assert pk.kernel_names == ["egg_wsum", "egg_gemvsum"] and pk.family == "gemm_sum"
    assert ("float4" in pk.cuda_source) == (plan.vec_a or plan.vec_b)
    r = compile_check(pk.cuda_source, ["-lineinfo"], "sm_90a")
    assert r.ok, r.log[-2000:]
    assert all((x.spill_store_bytes, x.spill_load_bytes) == (0, 0) for x in r.resources), r.resources
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(path, g, pk, tmp_egg / "emu")
    assert err < 8 * max(eager_err, 2 ** -24), (err, eager_err)


@pytest.mark.parametrize("body", [
    "return torch.sum(torch.sigmoid(self.lin(x)), dim=1)",  # a nonlinear op between: the sum does not commute
    "return torch.sum(self.lin(x) + 1.0, dim=1)",  # not a scaling (an offset per element)
    "return torch.sum(self.lin(x), dim=0)",  # over the rows, not the columns
    "y = self.lin(x)\n        return torch.sum(y, dim=1, keepdim=True) + y",  # the matmul's output is kept
])
def test_a_matmul_not_only_summed_keeps_its_output(tmp_egg, body):
    path = _task(tmp_egg, "self.lin = nn.Linear(24, 40)", body, "6, 24")
    g, fam, plan = ExpertAgent()._plan(str(path))
    assert gemm_sum.find(g) is None and fam != "gemm_sum"
    assert fam == "program" and plan.stages()[0][1] == "gemm"


def test_a_matmul_row_sum_leads_a_program(tmp_egg):
    """A softmax over the batch after the row sums: the sums are one kernel (no matmul output), the softmax
    a second; on the emulator against float64."""
    from tests import cpu_emulator
    from tests.test_expert import request
    path = _task(tmp_egg, "self.lin = nn.Linear(24, 40)", "return torch.softmax(torch.sum(self.lin(x), dim=1) * 0.1, dim=0)",
                 "7, 24")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path))
    assert fam == "program" and [s[1] for s in plan.stages()] == ["gemm_sum", "rows"]
    pk = agent.propose(request(path)).kernels[0]
    assert pk.kernel_names[:2] == ["egg_wsum", "egg_gemvsum"] and len(pk.kernel_names) == 3
    if not cpu_emulator.available():
        pytest.skip("no g++")
    err, eager_err = cpu_emulator.run_module(path, g, pk, tmp_egg / "emu")
    assert err < 8 * max(eager_err, 2 ** -24), (err, eager_err)
