#!/bin/bash
# KernelBench levels 1-2 on the lent H200, resumable across device calls.
# Here (once): ../shared/device/wheels.sh; mkdir -p .kb && cp -r ../shared/kernelbench/level{1,2} .kb/
#   (.kb and .whl are ignored: list them in .git/info/exclude) and carry [".whl", ".kb", "bench_state"].
# There: benchmarks/kb_device.sh [egg bench options...]. The bench's checkpoints live in bench_state/
# (carried back and forth: copy $OUT/kb/* into bench_state/ after each call), so a call that runs out
# of time loses at most the task in flight and the next call resumes where it stopped.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export EGG_COMMIT=${EGG_COMMIT:-$(cat bench_state/COMMIT 2>/dev/null || echo unknown)} PYTHONUNBUFFERED=1
mkdir -p bench_out/kb
cp bench_state/checkpoints.sqlite bench_out/kb/ 2>/dev/null
budget=${KB_SECONDS:-540}
timeout --signal=INT "$budget" python3 -m graph.cli bench .kb/level1 .kb/level2 --out bench_out/kb \
  --candidates-per-stage 2 --reps 30 "$@" 2>&1 | grep -v "^\[bench\]   .*: \(parallel_mapping\|tiling\|memory_optimization\|algorithm_design\|analysis\|finalize\)$" | tail -c 200000 > "$OUT/bench.log"
mkdir -p "$OUT/kb"
cp bench_out/kb/results.json bench_out/kb/results.md "$OUT/kb/" 2>/dev/null
python3 - <<'PY'
# checkpoint back to this machine: vacuumed, so it fits what a call may return
import sqlite3, shutil, os
src = "bench_out/kb/checkpoints.sqlite"
if os.path.exists(src):
    con = sqlite3.connect(src); con.execute("PRAGMA wal_checkpoint(TRUNCATE)"); con.execute("VACUUM"); con.close()
    shutil.copy(src, os.path.join(os.environ["OUT"], "kb", "checkpoints.sqlite"))
PY
tail -5 "$OUT/bench.log"; ls -la "$OUT/kb"
