#!/usr/bin/env bash
# For the lead, on one H100 (< 5 min): the C loop-nest examples on the GPU.
#  1. pytest -m gpu tests/test_affine_gpu.py (affine kernels vs reference / CPU loop nest);
#  2. `einkern run -b cuda --check` on each example at a medium size: raised examples use the
#     tensor-program mappings, the others einkern.gpu.affine's kernels (box with guards, or one
#     thread for a dependence-carrying outer loop — expect those to be slow);
#  3. a short table: example, path (tensor / affine), median ms, check result.
# Logs under $OUT/cfront/.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc-cfront PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; LOG="$OUT/cfront"; mkdir -p "$LOG"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$LOG/gpu.txt" 2>&1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_affine_gpu.py \
  > "$LOG/pytest_gpu.txt" 2>&1
echo "pytest -m gpu tests/test_affine_gpu.py: exit $?"; tail -3 "$LOG/pytest_gpu.txt"
printf '%-16s %-7s %12s  %s\n' example path median check > "$LOG/table.txt"
for f in examples/*.c; do
  name=$(basename "$f")
  sizes=$(python3 - "$f" <<'PY'
import sys
from einkern.lang.cfront import parse_c
fn = parse_c(open(sys.argv[1]).read()).functions[0]
big = 24 if "doitgen" in sys.argv[1] else 128
print(" ".join(f"-e {s}={4 if s == 'tsteps' else big}" for s in fn.sizes))
PY
)
  path=$(python3 -m einkern check "$f" $sizes 2>/dev/null | grep -q "tensor   yes" && echo tensor || echo affine)
  timeout 60 python3 -m einkern run "$f" $sizes -b cuda --check --repeat 5 > "$LOG/$name.txt" 2>&1
  code=$?
  median=$(grep -o "median [0-9.]* ms" "$LOG/$name.txt" | head -1 | awk '{print $2}')
  status=$([ $code -eq 0 ] && echo ok || echo "FAILED($code)")
  printf '%-16s %-7s %12s  %s\n' "$name" "$path" "${median:-?}" "$status" >> "$LOG/table.txt"
done
cat "$LOG/table.txt"
