#!/usr/bin/env bash
# For the lead, on an H100 (< 5 min): time and error of float32 reductions under each
# accumulation (plain / blocked / wide) of the accurate-sums rule (docs/accuracy.md):
# SGEMM 1024 and 4096, long reductions onto small outputs, two fp32 einsum contractions.
# Logs and gpu_accuracy.json land in $OUT; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc-accuracy PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout 270 python3 scripts/gpu_accuracy.py --runs 30 --out "$OUT" "$@" > "$OUT/gpu_accuracy.log" 2>&1
status=$?
echo "gpu_accuracy.py exit $status"
grep -E "^[A-Za-z].*Error|^\{" "$OUT/gpu_accuracy.log" | tail -30 > "$OUT/rows.txt"
# The CPU side on the device machine's 16 quiet cores (the development VM is too loaded).
timeout 100 python3 scripts/accuracy_cpu_times.py --runs 30 > "$OUT/cpu_times.log" 2>&1
echo "accuracy_cpu_times.py exit $? (CPU, OpenMP, fastest of 30)"
grep "^|" "$OUT/cpu_times.log"
echo
sed -n '/^| case/,$p' "$OUT/gpu_accuracy.log"
exit $status
