#!/bin/bash
# KernelBench levels 1-2 on the lent H200, resumable across device calls.
# Here (once): ../shared/device/wheels.sh; mkdir -p .kb && cp -r ../shared/kernelbench/level{1,2} .kb/
#   (.kb and .whl are ignored: list them in .git/info/exclude) and carry [".whl", ".kb", "bench_state"].
# There: benchmarks/kb_device.sh [egg bench options...]. The bench's checkpoints live in bench_state/
# (carried back and forth: copy $OUT/kb/checkpoints.sqlite.xz into bench_state/ after each call), so a call that runs out
# of time loses at most the task in flight and the next call resumes where it stopped.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export EGG_COMMIT=${EGG_COMMIT:-$(cat bench_state/COMMIT 2>/dev/null || echo unknown)} PYTHONUNBUFFERED=1
mkdir -p bench_out/kb
[ -f bench_state/checkpoints.sqlite.xz ] && [ ! -f bench_out/kb/checkpoints.sqlite ] && python3 -c "
import lzma, shutil; shutil.copyfileobj(lzma.open('bench_state/checkpoints.sqlite.xz'), open('bench_out/kb/checkpoints.sqlite', 'wb'))"
budget=${KB_SECONDS:-540}
timeout --signal=INT "$budget" python3 -m graph.cli bench .kb/level1 .kb/level2 --out bench_out/kb \
  --candidates-per-stage 2 --reps 30 "$@" 2>&1 | grep -v "^\[bench\]   .*: \(parallel_mapping\|tiling\|memory_optimization\|algorithm_design\|analysis\|finalize\)$" | tail -c 200000 > "$OUT/bench.log"
mkdir -p "$OUT/kb"
cp bench_out/kb/results.json bench_out/kb/results.md "$OUT/kb/" 2>/dev/null
python3 - <<'PY'
# checkpoint back to this machine: vacuumed and compressed, so it fits what a call may return (16 MiB a file)
import sqlite3, shutil, os
src = "bench_out/kb/checkpoints.sqlite"
if os.path.exists(src):
    con = sqlite3.connect(src); con.execute("PRAGMA wal_checkpoint(TRUNCATE)"); con.execute("VACUUM"); con.close()
    import lzma
    with open(src, "rb") as f, lzma.open(os.path.join(os.environ["OUT"], "kb", "checkpoints.sqlite.xz"), "wb", preset=6) as g:
        shutil.copyfileobj(f, g)
PY
tail -5 "$OUT/bench.log"; ls -la "$OUT/kb"
