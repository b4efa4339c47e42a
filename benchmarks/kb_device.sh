#!/bin/bash
# KernelBench levels 1-2 on the lent H200, resumable across device calls.
# Here, before every call: git rev-parse --short HEAD > bench_state/COMMIT (the tree there has no .git).
# Here (once): ../shared/device/wheels.sh; mkdir -p .kb && cp -r ../shared/kernelbench/level{1,2} .kb/
#   (.kb and .whl are ignored: list them in .git/info/exclude) and carry [".whl", ".kb", "bench_state"].
# There: [BENCH_NAME=kb BENCH_PATHS='.kb/level1 .kb/level2' CPS=2 REPS=30 KB_SECONDS=540] benchmarks/kb_device.sh [egg bench flags].
# Timing first candidates only (--total-candidates 1)? Add --no-profile: no later stage reads the profile, and ncu
# replays each kernel of a network's program (ResNet-101's first candidate: 238 s with it). The bench's checkpoints live in bench_state/
# (carried back and forth: copy $OUT/NAME/NAME.sqlite.xz into bench_state/ after each call), so a call that runs out
# of time loses at most the task in flight and the next call resumes where it stopped.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export EGG_COMMIT=${EGG_COMMIT:-$(cat bench_state/COMMIT 2>/dev/null || echo unknown)} PYTHONUNBUFFERED=1
name=${BENCH_NAME:-kb}; paths=${BENCH_PATHS:-.kb}  # .kb: task keys keep their level (level1/19_ReLU)
mkdir -p "bench_out/$name"
[ -f "bench_state/$name.sqlite.xz" ] && [ ! -f "bench_out/$name/checkpoints.sqlite" ] && python3 -c "
import lzma, shutil; shutil.copyfileobj(lzma.open('bench_state/$name.sqlite.xz'), open('bench_out/$name/checkpoints.sqlite', 'wb'))"
budget=${KB_SECONDS:-540}
# shellcheck disable=SC2086
timeout -k 20 --signal=INT "$budget" python3 -m graph.cli bench $paths --out "bench_out/$name" \
  --candidates-per-stage "${CPS:-2}" --reps "${REPS:-30}" "$@" 2>&1 | grep -v "^\[bench\]   .*: \(parallel_mapping\|tiling\|memory_optimization\|algorithm_design\|analysis\|finalize\)$" | tail -c 200000 > "$OUT/$name.log"
mkdir -p "$OUT/$name"
cp "bench_out/$name/results.json" "bench_out/$name/results.md" "$OUT/$name/" 2>/dev/null
NAME=$name python3 - <<'PY'
# checkpoint back to this machine: vacuumed and compressed, so it fits what a call may return (16 MiB a file)
import sqlite3, shutil, os
src = "bench_out/%s/checkpoints.sqlite" % os.environ["NAME"]
if os.path.exists(src):
    con = sqlite3.connect(src); con.execute("PRAGMA wal_checkpoint(TRUNCATE)"); con.execute("VACUUM"); con.close()
    import lzma
    with open(src, "rb") as f, lzma.open(os.path.join(os.environ["OUT"], os.environ["NAME"], os.environ["NAME"] + ".sqlite.xz"), "wb", preset=6) as g:
        shutil.copyfileobj(f, g)
PY
tail -4 "$OUT/$name.log"; ls -la "$OUT/$name"
