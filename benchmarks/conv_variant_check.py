"""On the GPU: every conv design of tests/test_gpu_conv.py's `every_layout` variants on one awkward case, each
candidate's verdict and reason printed (the test stops at the first). `python3 benchmarks/conv_variant_check.py [CASE]`."""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_expert_conv import CASES, _task  # noqa: E402
from tests.test_gpu_conv import _candidates  # noqa: E402


def main() -> None:
    from hardware_profiles.profile import detect
    from runtime.evaluator import GpuEvaluator
    case = CASES[int(sys.argv[1]) if len(sys.argv) > 1 else 3]
    *spec, (BM, BN, WM, WN, S) = case
    path = _task(Path(tempfile.mkdtemp()), *spec)
    knobs = {"BM": BM, "BN": BN, "WM": WM, "WN": WN, "stages": S, "layout": "nhwc"}
    w = {**knobs, "wgmma": True, "BM": 64, "BN": 64}
    variants = [{**w, "stages": 4}, {**w, "swz": True, "stages": 3}, {**w, "swz": True, "lead": True, "stages": 3},
                {**w, "lead": True, "stages": 3}, {**w, "swz": True, "stages": 3, "split": 3, "planes": True},
                {**w, "swz": True, "stages": 3, "BN": 32}]
    ev = GpuEvaluator(arch=detect().arch, timeout_s=120, reps=5)
    try:
        for v, e in zip(variants, ev.evaluate(str(path), _candidates(path, variants), None)):
            print(v, e.verdict.value, (e.reason or "")[:300], flush=True)
    finally:
        ev.close()


if __name__ == "__main__":
    main()
