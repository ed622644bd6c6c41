#!/usr/bin/env bash
# The GPU checks of a session in one device call: the GPU tests, then the benchmark
# suites (scripts/bench_gpu.sh), then a short CUDA tuning run of one kernel.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/ > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest -m gpu exit $?"; grep -E "passed|failed|FAILED" "$OUT/pytest_gpu.txt" | tail -5
if [ "${SKIP_BENCH:-}" = "" ]; then timeout 330 bash scripts/bench_gpu.sh all > "$OUT/bench_stdout.txt" 2>&1; echo "bench exit $?"; fi
timeout 120 python3 -m einkern tune examples/sd_t_d1_1.ein --backend cuda --strategy model \
  --budget 20 --explain --db /tmp/tune.sqlite > "$OUT/tune.txt" 2>&1
echo "tune exit $?"; tail -8 "$OUT/tune.txt"
tail -60 "$OUT/bench_stdout.txt"
