#!/usr/bin/env bash
# Issue 14 on a GPU in one device call (< 5 minutes): the fusion planner's kernels
# against one kernel per statement and the hand-merged CCSD(T) statements
# (scripts/gpu_fusion.py), the fusion tests, and --explain of ccsdt_d1 and
# fousek_function2.  Logs under $OUT; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" tests/test_fusion.py > "$OUT/pytest_fusion.txt" 2>&1
echo "pytest tests/test_fusion.py exit $?"; tail -2 "$OUT/pytest_fusion.txt"
for f in examples/ccsdt_d1.ein examples/fousek_function2.mapped; do
  timeout 20 python3 -m einkern emit "$f" --backend cuda --explain > "$OUT/explain_$(basename "$f").txt" 2>&1
  grep '^// ' "$OUT/explain_$(basename "$f").txt" | head -12
done
timeout 180 python3 scripts/gpu_fusion.py --json "$OUT/fusion.json" > "$OUT/fusion.txt" 2>&1
echo "gpu_fusion.py exit $?"
tail -40 "$OUT/fusion.txt"
