#!/usr/bin/env bash
# Issue 11 (helper gett): the failure-mode shapes at the issue's sizes (fp64: three
# 6-index orders and a column-major one, a long reduction onto a 32x32 output, a
# compute-bound 4x4-index contraction over two indices at extent 70) and SGEMM
# 256/1024/4096: einkern's default (the cost model's choice), the rules' proposal
# and the model's next GETT points, against torch.einsum (cuTENSOR when cupyx
# loads). CUDA events, L2 flushed, median of 15. Logs and calibration lines under
# $OUT; the table is printed last. Under 5 minutes on an H100.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc-gett PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout 280 python3 scripts/gpu_gett.py --out "$OUT" --runs 15 --points 2 > "$OUT/gpu_gett.log" 2>&1
echo "gpu_gett.py exit $?"
grep -E "failed|stopping" "$OUT/gpu_gett.log" | head -10
tail -40 "$OUT/gpu_gett.log"
