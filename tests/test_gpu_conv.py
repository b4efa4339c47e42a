"""On a GPU: every convolution layout of the expert (in place, channels last, phase-split transposed,
1x1 as a GEMM, wgmma) at awkward shapes, verified by the real evaluator under the float64 rule; a fused
level-2 chain; channel, position and batch reductions in the wgmma conv's epilogue;
the 3xTF32 GEMM on wgmma (split in registers, or from planes split once in memory); and a profiled candidate whose metrics reach `egg history`.
`pytest -m gpu`."""
import pytest

from agents.expert import ExpertAgent
from state import KernelCandidate
from tests.test_expert_conv import CASES, TMA_SPECS, WHOLE_SPECS, _task
from tests.test_expert_conv_pooled import CASES as POOLED_CASES
from tests.test_expert_conv_rows import CASES as ROW_CASES
from tests.test_expert_conv_stats import CASES as STATS_CASES

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def evaluator():
    from hardware_profiles.profile import detect
    from runtime.evaluator import GpuEvaluator
    ev = GpuEvaluator(arch=detect().arch, timeout_s=120, reps=5)  # sm_90a on an H200: wgmma needs the "a"
    yield ev
    ev.close()


def _candidates(path, variants):
    from hardware_profiles.profile import detect
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path))
    out = []
    base = {k: v for k, v in agent._default(fam, g, plan, None).items() if k not in ("wgmma", "swz", "tma")}  # mma.sync's
    for i, extra in enumerate(variants):
        pk = agent.emit(g, fam, plan, {**base, **extra}, detect())
        out.append(KernelCandidate(id=f"c{i}", stage="algorithm_design", cuda_source=pk.cuda_source,
                                   host_code=pk.host_code, kernel_names=pk.kernel_names, params=pk.params,
                                   compile_options=pk.compile_options, family=pk.family))
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d-{c[1]}to{c[2]}-g{c[7]}")
def test_every_layout_verifies_at_awkward_shapes(tmp_egg, evaluator, case):
    *spec, (BM, BN, WM, WN, S) = case
    path = _task(tmp_egg, *spec)
    knobs = {"BM": BM, "BN": BN, "WM": WM, "WN": WN, "stages": S}
    variants = [{**knobs, "layout": lay, "split": sp} for lay in ("nchw", "nhwc") for sp in (1, 3)]
    variants.append({**knobs, "layout": "nhwc", "ldm": True})
    variants.append({**knobs, "layout": "nhwc", "wgmma": True, "BM": 64, "BN": 64, "stages": 4})  # the hardware reads wgmma's layout as the emulator does
    variants.append({**knobs, "layout": "nhwc", "wgmma": True, "swz": True, "lead": True, "BM": 64, "BN": 64, "stages": 3})  # tiles 2 ahead
    variants.append({**knobs, "layout": "nhwc", "wgmma": True, "swz": True, "split": 3, "planes": True, "BM": 64, "BN": 64,
                     "stages": 3})  # 3xTF32 on staged planes: fp32 grade
    variants.append({**knobs, "layout": "nhwc", "wgmma": True, "swz": True, "BM": 64, "BN": 32, "stages": 3})  # m64n32k8
    evs = evaluator.evaluate(str(path), _candidates(path, variants), None)
    _judged_as_eager_allows(evs, variants)


# and one with many more tiles than the GPU holds blocks (576 of 128 pixels): each block walks several
@pytest.mark.parametrize("spec,tile", WHOLE_SPECS + [
    ((2, 8, 64, 3, 1, 1, 1, 1, True, (8, 8, 96, 96), "torch.relu(self.conv(x)) * 2.0"), (128, 64, 2, 4))])
def test_whole_k_conv_verifies(tmp_egg, evaluator, spec, tile):
    """The whole-K conv (conv_short): the weight held once, pixel tiles walked by a persistent block through
    two A buffers, 3xTF32 and TF32."""
    path = _task(tmp_egg, *spec)
    BM, BN, WM, WN = tile
    variants = [{"BM": BM, "BN": BN, "WM": WM, "WN": WN, "layout": "nhwc", "whole": True, "split": sp} for sp in (3, 1)]
    evs = evaluator.evaluate(str(path), _candidates(path, variants), None)
    _judged_as_eager_allows(evs, variants)
    conv = next(r for r in evs[0].compile.resources if r.name == "egg_conv")
    assert conv.dynamic_shared_bytes > 0  # the held weight and both A buffers: dynamic, recorded as launched


@pytest.mark.parametrize("spec,tile", TMA_SPECS,
                         ids=lambda x: f"{x[0]}-{x[1]}-{x[4]}" if isinstance(x, tuple) and len(x) == 11 else None)
def test_tma_conv_verifies_at_awkward_shapes(tmp_egg, evaluator, spec, tile):
    """The conv whose tiles come by TMA (conv_tma): padding and patch overhangs zero-filled by the map's
    bounds, fewer channels than a box, groups of 32, 1-d to 3-d maps, transposed by phase, one and two
    consumer warpgroups, persistent, and its two consumers in ping-pong."""
    path = _task(tmp_egg, *spec)
    base = {"layout": "nhwc", "split": 1, "wgmma": True, "swz": True, "tma": True, "BN": tile[1]}
    variants = [{**base, "BM": tile[0], "stages": 3}, {**base, "BM": 128, "stages": 4}, {**base, "BM": 128, "stages": 4, "persist": True},
                {**base, "BM": 128, "stages": 6, "persist": True, "pingpong": True}]  # 64-position tiles in turn
    evs = evaluator.evaluate(str(path), _candidates(path, variants), None)
    _judged_as_eager_allows(evs, variants)


def _judged_as_eager_allows(evs, variants):
    """3xTF32 is fp32-grade: always correct. Plain TF32 has eager's room only where eager's cuDNN itself ran
    TF32; at small shapes cuDNN often picks an exact fp32 algorithm, and then the float64 rule must reject
    TF32 (its error against eager's own is the downgrade the rule exists to catch)."""
    for e, v in zip(evs, variants):
        if v.get("split", 1) == 3 or e.verdict.value == "correct":
            assert e.verdict.value == "correct", (e.candidate_id, v, e.reason)
            continue
        worst = e.correctness.worst if e.correctness else None
        assert e.verdict.value == "incorrect" and worst is not None, (e.candidate_id, v, e.reason)
        assert worst.eager_norm < 1e-5 and worst.cand_norm < 1e-2, (e.candidate_id, v, e.reason)  # TF32-grade, eager exact


def test_pointwise_conv_gemm_layout_and_a_fused_chain_verify(tmp_egg, evaluator):
    path = _task(tmp_egg, 2, 12, 24, 1, 1, 0, 1, 2, True, (3, 12, 9, 13),
                 "torch.nn.functional.gelu(self.conv(x)) * torch.sigmoid(self.extra)")
    cands = _candidates(path, [{}, {"split": 3}])
    assert cands[0].params["layout"] == "gemm"  # the default layout of a 1x1 conv without stride or padding
    evs = evaluator.evaluate(str(path), cands, None)
    _judged_as_eager_allows(evs, [cands[0].params, cands[1].params])


def test_a_profiled_candidate_carries_its_metrics_into_history(tmp_egg, capsys):
    from graph.cli import main
    from graph.runner import optimize
    from runtime.profiler import ncu_path
    from state import Budget
    from tests.conftest import ROOT
    if ncu_path() is None:
        pytest.skip("no ncu")
    cp = str(tmp_egg / "cp.sqlite")
    tid, st = optimize(ROOT / "tasks" / "suite" / "level1" / "03_gelu.py", checkpoint=cp, out_dir=str(tmp_egg / "out"),
                       budget=Budget(candidates_per_stage=1, total_candidates=2), quiet=True, timing_reps=5)
    assert st.result.status == "verified"
    profs = [p for p in st.profiles if p.available]
    assert profs and profs[0].duration_ms and profs[0].sm_pct is not None, st.profiles
    assert 0 < profs[0].memory_pct <= 100
    main(["--checkpoint", cp, "history", tid])
    assert profs[0].summary()[:30] in capsys.readouterr().out


@pytest.mark.parametrize("expr,sa,sb", [("torch.matmul(a, b)", (300, 517), (517, 260)),
                                        ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 64), (200, 64)),
                                        ("torch.bmm(a, b)", (3, 65, 40), (3, 40, 129))])
def test_tf32x3_wgmma_gemm_is_fp32_grade(tmp_egg, evaluator, expr, sa, sb):
    """The 3xTF32 GEMM on the warpgroup MMA (A split in registers, B in canonical planes) passes the
    float64 rule at fp32 grade, beside the mma.sync kernel."""
    from tests.test_expert_tf32 import TEMPLATE
    p = tmp_egg / "g.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb))))
    cands = _candidates(p, [{}, {"wgmma": True, "BM": 64, "BN": 64}, {"wgmma": True, "BM": 128, "BN": 128}])
    evs = evaluator.evaluate(str(p), cands, None)
    assert [e.verdict.value for e in evs] == ["correct"] * 3, [(e.candidate_id, e.reason) for e in evs]


@pytest.mark.parametrize("expr,sa,sb", [("torch.matmul(a, b)", (300, 517), (517, 260)),
                                        ("torch.relu(torch.matmul(a, b.T)) * 2.0", (130, 64), (200, 64)),
                                        ("torch.matmul(a, b)", (4096, 4096), (4096, 4096)),
                                        ("torch.matmul(a, b)", (300, 40), (40, 261))])  # short K, an odd N
def test_tf32x3_from_split_planes_is_fp32_grade(tmp_egg, evaluator, expr, sa, sb):
    """3xTF32 on the warpgroup MMA from operands split once into planes (two kernels: the split, then
    the GEMM on four canonical tiles a stage), each fold, under the float64 rule at fp32 grade; at 4096^3
    K = 4096 checks the per-fold sums."""
    from tests.test_expert_tf32 import TEMPLATE
    p = tmp_egg / "g.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb))))
    planes = {"wgmma": True, "planes": True, "BM": 128, "stages": 3}
    variants = [{**planes, "BN": 128, "fold": 4}, {**planes, "BN": 64, "stages": 4, "fold": 8},
                {**planes, "BN": 128, "fold": 1}, {**planes, "BN": 128, "fold": 4, "BK": 32, "swz": True, "lead": True},
                {**planes, "BN": 128, "fold": 4, "BK": 32, "swz": True, "tma": True},  # the planes by TMA
                {**planes, "BM": 64, "BN": 64, "stages": 4, "fold": 2, "BK": 32, "swz": True, "tma": True},
                {**planes, "BN": 128, "fold": 1, "BK": 32, "swz": True, "tma": True}]  # a fold of one k-tile (short K)
    if "b.T" in expr:  # B (N, K): split in the ring, tiles S - 2 and S - 1 ahead
        sw = {**planes, "BN": 128, "BK": 32, "swz": True, "bsplit": True}
        variants += [sw, {**sw, "lead": True}]
    evs = evaluator.evaluate(str(p), _candidates(p, variants), None)
    assert [e.verdict.value for e in evs] == ["correct"] * len(variants), [(e.candidate_id, e.reason) for e in evs]


@pytest.mark.parametrize("expr,sa,sb", [("torch.matmul(a, b)", (1030, 770), (770, 2060)),
                                        ("torch.relu(torch.matmul(a, b.T))", (2050, 1000), (3000, 1000)),
                                        ("torch.bmm(a, b)", (3, 300, 136), (3, 136, 520)),
                                        ("torch.matmul(a, b.T)", (3, 300, 136), (520, 136)),
                                        ("torch.matmul(a, b)", (1000, 776), (776, 2056)), ("torch.matmul(a, b)", (1000, 776), (776, 1984)),
                                        ("torch.matmul(a, b.T)", (3, 250, 136), (520, 136))])
def test_tma_gemm_verifies(tmp_egg, evaluator, expr, sa, sb):
    """The warp-specialised bf16 GEMM (tiles by TMA from a producer warpgroup, mbarriers): staged and
    straight from the tensors (the maps' bounds zero-fill the edges; a (K, N) B read MN-major, the MMA's B
    transposed), one and two consumer warpgroups, persistent (a block an SM walking the tiles; ping-pong), and B
    multicast over clusters of two blocks (persistent too)."""
    from tests.test_expert_wgmma16 import TEMPLATE
    p = tmp_egg / "g16.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb)), dt="bfloat16"))
    w = {"wgmma": True, "tma": True, "BM": 128, "direct": False}
    variants = [{**w, "BN": 256, "stages": 4}, {**w, "BN": 128, "stages": 5}, {**w, "BM": 64, "BN": 256, "stages": 4},
                {**w, "BN": 128, "stages": 4, "persist": True}, {**w, "BN": 256, "stages": 5, "persist": True, "pingpong": True}]
    if "b.T" in expr or sb[-1] % 8 == 0:  # B (N, K), or (K, N) with rows of 16-byte pieces: the tensors' own maps
        variants += [{**w, "BN": 256, "stages": 4, "direct": True}, {**w, "BM": 64, "BN": 128, "stages": 3, "direct": True},
                     {**w, "BN": 256, "stages": 4, "direct": True, "persist": True},
                     {**w, "BN": 256, "stages": 5, "direct": True, "persist": True, "pingpong": True}]
    if "b.T" not in expr and sb[-1] % 64 == 0:  # B (K, N) in one 4-d box a k-tile (its 64-column blocks a dim)
        variants += [{**w, "BN": 256, "stages": 4, "direct": True, "bchunks": True},
                     {**w, "BN": 256, "stages": 4, "direct": True, "bchunks": True, "persist": True}]
    if -(-sa[-2] // 128) % 2 == 0:  # B multicast over clusters of two row tiles (an even number of them)
        variants += [{**w, "BN": 256, "stages": 4, "mcast": True}, {**w, "BN": 128, "stages": 5, "mcast": True}]
        if "b.T" in expr or sb[-1] % 8 == 0:
            variants += [{**w, "BN": 256, "stages": 4, "direct": True, "mcast": True},
                         {**w, "BN": 256, "stages": 4, "direct": True, "mcast": True, "persist": True}]
    evs = evaluator.evaluate(str(p), _candidates(p, variants), None)
    assert [e.verdict.value for e in evs] == ["correct"] * len(variants), [(e.candidate_id, e.reason) for e in evs]


@pytest.mark.parametrize("expr,sa,sb", [("torch.matmul(a, b)", (1030, 770), (770, 2060)),
                                        ("torch.relu(torch.matmul(a, b.T))", (2050, 1000), (3000, 1000))])
def test_wgmma16_rings_verify(tmp_egg, evaluator, expr, sa, sb):
    """The bf16 warpgroup-MMA GEMM with its ring S - 2 and S - 1 tiles ahead (lead), two tile widths."""
    from tests.test_expert_wgmma16 import TEMPLATE
    p = tmp_egg / "g16.py"
    p.write_text(TEMPLATE.format(expr=expr, sa=", ".join(map(str, sa)), sb=", ".join(map(str, sb)), dt="bfloat16"))
    w = {"wgmma": True, "BM": 128}
    variants = [{**w, "BN": 128, "stages": 4, "lead": True}, {**w, "BN": 256, "stages": 3, "lead": True}, {**w, "BN": 256, "stages": 3}]
    evs = evaluator.evaluate(str(p), _candidates(p, variants), None)
    assert [e.verdict.value for e in evs] == ["correct"] * len(variants), [(e.candidate_id, e.reason) for e in evs]


def test_baselines_measure_eagers_own_error_where_it_may_run_tf32(tmp_egg, evaluator):
    """The baseline worker measures eager's error against float64 where cuDNN may run TF32, so the agent
    knows the room before its first candidate; a task with no such op is not measured."""
    from tests.test_expert_tf32 import TEMPLATE
    conv = _task(tmp_egg, 2, 8, 16, 3, 1, 1, 1, 1, True, (2, 8, 9, 9), "self.conv(x)")
    err = evaluator.baselines(str(conv)).eager_err
    assert err is not None and 0 < err < 1e-2, err
    p = tmp_egg / "pw.py"
    p.write_text(TEMPLATE.format(expr="torch.relu(a) * 2.0 + b", sa="64, 32", sb="64, 32"))
    assert evaluator.baselines(str(p)).eager_err is None


def test_a_programs_kernels_are_timed_one_by_one(tmp_egg, evaluator):
    """Issue 19's per-region times: a conv program (the conv, then a mean over its output) verified, with
    each kernel's time within a call recorded; together they are about the whole call's time."""
    path = _task(tmp_egg, 2, 8, 16, 3, 1, 1, 1, 1, True, (4, 8, 32, 32), "self.conv(x).mean(dim=(2, 3))")
    from tests.test_expert import request
    pk = ExpertAgent().propose(request(path)).kernels[0]  # the mean folded in first: a box sum, then the conv
    cand = KernelCandidate(id="p0", stage="algorithm_design", cuda_source=pk.cuda_source, host_code=pk.host_code,
                           kernel_names=pk.kernel_names, params=pk.params, compile_options=pk.compile_options,
                           family=pk.family)
    assert len(cand.kernel_names) >= 2
    (ev,) = evaluator.evaluate(str(path), [cand], None)
    assert ev.verdict.value == "correct", ev.reason
    assert list(ev.kernel_ms) == cand.kernel_names and all(ms > 0 for ms in ev.kernel_ms.values())
    # timed back to back behind a spin kernel (runtime/worker.py `_kernel_times`): about the call's own time, not the
    # call's plus Python's launch gaps
    assert sum(ev.kernel_ms.values()) < 1.5 * ev.timing.median_ms + 0.01, (ev.kernel_ms, ev.timing)


def _epilogue_family_verifies(evaluator, path, family):
    """A task whose conv reduces its tile in the epilogue, planned as `family`: 3xTF32 on planes at two tiles (the
    second with the ring a tile further ahead) always correct, plain TF32 where eager's cuDNN ran TF32."""
    from hardware_profiles.profile import detect
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(path), detect())
    assert fam == family
    base = agent._default(fam, g, plan, None)
    variants = [{**base, "split": 3, "planes": True}, {**base, "split": 3, "planes": True, "BM": 64, "lead": True}, base]
    from agents.expert.agent import WHOLE_K_EPILOGUES, whole_k
    if fam in WHOLE_K_EPILOGUES and (whole := whole_k(plan.conv, 3, detect())):  # and on the whole-K persistent kernel
        variants += [{**whole, "family": fam}, {**whole, "family": fam, "split": 1}]
    cands = []
    for i, v in enumerate(variants):
        pk = agent.emit(g, fam, plan, v, detect())
        cands.append(KernelCandidate(id=f"c{i}", stage="algorithm_design", cuda_source=pk.cuda_source, host_code=pk.host_code,
                                     kernel_names=pk.kernel_names, params=pk.params, compile_options=pk.compile_options,
                                     family=pk.family))
    _judged_as_eager_allows(evaluator.evaluate(str(path), cands, None), variants)


@pytest.mark.parametrize("case", [(c[0], c[1], "conv_rows") for c in ROW_CASES] + [(*c, "conv_pooled") for c in POOLED_CASES],
                         ids=["min", "softmax_T2", "logsumexp_T3", "mean", "gelu_mean", "adaptive", "conv3d_sum", "T2_mean"])
def test_reductions_in_the_conv_epilogue_verify(tmp_egg, evaluator, case):
    """conv_rows and conv_pooled on the GPU: the shuffles and the D fragment's rows and columns as the hardware has
    them (the CPU emulator models both)."""
    spec, expr, family = case
    _epilogue_family_verifies(evaluator, _task(tmp_egg, *spec, expr), family)


@pytest.mark.parametrize("case", STATS_CASES, ids=["scale", "relu_shift", "T2_phased", "conv3d"])
def test_batch_statistics_from_the_conv_epilogue_verify(tmp_egg, evaluator, case):
    """conv_stats on the GPU, in training mode as KernelBench runs it: the tiles' statistics and their combination
    as the hardware computes them."""
    from tests.test_expert_conv_stats import _path
    _epilogue_family_verifies(evaluator, _path(tmp_egg, *case), "conv_stats")


def test_batch_statistics_over_many_waves_of_tiles_verify(tmp_egg, evaluator):
    """Level 3 RegNet's first conv and BatchNorm at its size (784 tiles of 128 pixels by all 128 channels, six waves):
    its default design computed NaN a launch at random, the shared tiles in the 128-byte swizzle (benchmarks/NOTES.md,
    twenty-fourth session); every variant must verify, each launch alike."""
    from tests.test_expert_conv_stats import _path
    _epilogue_family_verifies(evaluator, _path(tmp_egg, "nn.Conv2d(64, 128, 3, padding=1)", 2, 128, "8, 64, 112, 112",
                                               "torch.relu(self.bn(self.conv(x)))"), "conv_stats")


@pytest.mark.parametrize("module,expr,shape", [
    ("nn.Identity()", "torch.softmax(x, dim=1)", "64, 393216"),  # KernelBench 23's rows, 64 of them
    ("nn.InstanceNorm2d(4)", "self.norm(x)", "16, 4, 512, 512"),  # KernelBench 34's rows (1 MB), a Welford triple
    ("nn.Identity()", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", "300, 100004"),  # a plain sum, a short last slice
    ("nn.Identity()", "x / torch.norm(x, p=2, dim=1, keepdim=True)", "257, 65535"),  # KernelBench 39's rows, off 16-byte
    # boundaries (each slice copied from the boundary before it); the tensor's end 3 floats past one
])
def test_cluster_rows_on_a_ring_verify(tmp_egg, evaluator, module, expr, shape):
    """Rows cached across a cluster, their slices copied by bulk copies in chunks refilled with the next row's (online
    and plain passes), beside the cluster staged by the threads: verified under the float64 rule."""
    from tests.test_expert_norms import TEMPLATE
    p = tmp_egg / "rows.py"
    p.write_text(TEMPLATE.format(module=module, expr=expr, shape=shape))
    agent = ExpertAgent()
    _, _, plan = agent._plan(str(p))
    from agents.expert.agent import row_cluster
    from hardware_profiles.profile import detect
    C = row_cluster(plan, detect())
    assert C
    w = {"mapping": "block", "block": 1024, "cache": "cluster", "cluster": C, "waves": 1}
    variants = [{**w, "ring": True}, {**w, "ring": True, "online": False, "welford": False}, {**w, "ring": True, "waves": 2}, w]
    evs = evaluator.evaluate(str(p), _candidates(p, variants), None)
    assert [e.verdict.value for e in evs] == ["correct"] * len(variants), [(e.candidate_id, e.reason) for e in evs]
