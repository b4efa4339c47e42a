"""On a GPU: the expert agent produces a verified kernel for a task of each covered family."""
import pytest

from graph.runner import optimize
from state import Budget
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu
SUITE = ROOT / "tasks" / "suite"


@pytest.mark.parametrize("task", ["level1/03_gelu", "level1/22_softmax", "level1/27_layer_norm", "level1/19_argmax_dim",
                                  "level1/16_mean_dim", "level1/29_matmul_bf16", "level1/28_matmul_fp32",
                                  "level2/03_linear_swish_bias_bf16", "level2/11_batchnorm_relu"])
def test_expert_kernel_verified(tmp_egg, task):
    _, st = optimize(SUITE / f"{task}.py", checkpoint=str(tmp_egg / "cp.sqlite"), out_dir=str(tmp_egg / "out"),
                     budget=Budget(candidates_per_stage=2), quiet=True)
    assert st.result.status == "verified", [(a.candidate_id, a.verdict, a.reason) for a in st.attempts]
    assert st.result.speedup_vs_eager > 0
    assert all(d.best_ms is not None for d in st.design.decisions)
