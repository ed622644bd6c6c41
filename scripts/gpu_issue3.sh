#!/usr/bin/env bash
# One device call for issue 3: install carried wheels, GPU tests, sanitizers, figures.
# Everything it writes lands in $OUT/issue3.tar.gz (a device call returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src || exit 1
else
  export PYTHONPATH=src
fi
export EINKERN_CACHE_DIR=/tmp/ekc PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; LOG=$(mktemp -d); mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$LOG/gpu.txt"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/ > "$LOG/pytest_gpu.txt" 2>&1
echo "pytest -m gpu exit $?"; tail -4 "$LOG/pytest_gpu.txt"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/sanitize_variants.py \
    > "$LOG/sanitize_$tool.txt" 2>&1; echo "compute-sanitizer $tool exit $?"
  grep -E " ok| WRONG|ERROR SUMMARY|RACECHECK SUMMARY|Error" "$LOG/sanitize_$tool.txt" | head -8
done
timeout 330 python3 scripts/bench_mappings.py --out "$LOG/bench.json" "$@" > "$LOG/bench.txt" 2>&1
echo "bench exit $?"
tar -czf "$OUT/issue3.tar.gz" -C "$LOG" .
tail -75 "$LOG/bench.txt"
