#!/usr/bin/env bash
# One device call for issue 3: install carried wheels, GPU tests, sanitizers, figures.
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src || exit 1
else
  export PYTHONPATH=src
fi
export EINKERN_CACHE_DIR=/tmp/ekc PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 150 python3 -m pytest -q -m gpu -x -p no:cacheprovider tests/ 2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/sanitize_variants.py \
    > "$OUT/sanitize_$tool.txt" 2>&1; echo "compute-sanitizer $tool exit $?"; grep -E "ok|WRONG|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize_$tool.txt" | head -8
done
timeout 300 python3 scripts/bench_mappings.py --out "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.txt" | tail -60
