# Sourced by the device probe scripts: installs the wheelhouse, then `gpu_tests FILE OUT -k EXPR` and
# `probe OUT TASK SECONDS [kernel_probe args]` (kernel_probe.py's JSON rows of each variant, appended to
# $OUT/OUT; its lines of errors too).
if [ -z "$EGG_PROBE_LIB" ]; then  # once a call: a script sourcing it again (session20a.sh running session20b.sh) skips it
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 EGG_PROBE_LIB=1 || exit 1
fi
gpu_tests() {  # test file, output name, seconds, pytest args...
  local f=$1 o=$2 s=$3; shift 3
  timeout "$s" python3 -m pytest -m gpu -q -rA "$f" "$@" > "$OUT/$o" 2>&1
  grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$OUT/$o" | tail -12
}
probe() {  # output name, task, seconds, kernel_probe args...
  local o=$1 t=$2 s=$3; shift 3
  echo "== $t" >> "$OUT/$o"
  timeout "$s" python3 benchmarks/kernel_probe.py "$t" --reps 10 --no-compile "$@" 2>&1 | grep -v Warning \
    | grep '^\[{"name"\|^{"name"\|Error\|error' | cut -c1-900 >> "$OUT/$o"
}
