#!/usr/bin/env bash
# Program rewrites on the GPU (issue 11 items 2 and 5; docs/rewrites.md): einkern's
# transpose kernel against a copy (ranks 2-6, fp32 and fp64), a long reduction with
# and without split-K, TTGT against the direct kernel (and sd_t_d2_5, to calibrate the
# plan's margin), each against torch; first the GPU tests of rewritten kernels
# (tests/test_rewrite_gpu.py); < 5 minutes; logs under $OUT; a table last
# ("vs ref": the copy's time / this one for transposes, torch.einsum's for split-K).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rewrite_gpu.py \
  > "$OUT/pytest_rewrite_gpu.txt" 2>&1
echo "pytest -m gpu tests/test_rewrite_gpu.py exit $?"; tail -3 "$OUT/pytest_rewrite_gpu.txt"
timeout 180 python3 scripts/gpu_rewrite.py > "$OUT/gpu_rewrite.txt" 2>&1
echo "gpu_rewrite exit $?"
grep -v '^{' "$OUT/gpu_rewrite.txt" | tail -40
