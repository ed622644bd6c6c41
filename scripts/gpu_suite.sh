#!/usr/bin/env bash
# The contractions generality benchmark on a GPU (issue 11), in under 8 minutes:
#
#   scripts/gpu_suite.sh SEED [COUNT]            # the suite: report under $OUT/suite-SEED
#   MODE=calibrate scripts/gpu_suite.sh SEED [COUNT]
#       # the cost model's calibration records instead: default + model-best + random
#       # configurations of COUNT (default 40) drawn cases, $OUT/calibration-SEED.jsonl
#
# Held-out workflow: calibrate/tune on one seed (say 1), report on another (say 2)
# that nothing was fitted on.  einkern, torch.einsum, cuTENSOR (cupyx.cutensor)
# and CuPy's einsum on the same device arrays, CUDA events, L2 flushed, median of
# 5 after 1 warm-up; the SIMT peaks and the copy bandwidth are measured in the
# same run.  cuTENSOR comes from /tmp/cutsite when scripts/gpu_cutensor.sh (or the
# parts of scripts/cutensor_parts.sh) installed it on this machine; otherwise its
# column says why it is unavailable.  The class summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
seed=${1:?usage: scripts/gpu_suite.sh SEED [COUNT]}
mode=${MODE:-suite}
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ ! -d /tmp/cutsite/cutensor/lib ] && [ -f .cut4/NAME ] && [ -f /tmp/cut/part2 ]; then
    cp .cut4/part3 /tmp/cut/ && name=$(cat .cut4/NAME) \
        && cat /tmp/cut/part0 /tmp/cut/part1 /tmp/cut/part2 /tmp/cut/part3 > "/tmp/$name" \
        && python3 -m pip install -q --no-deps --no-index --target /tmp/cutsite "/tmp/$name"
fi
if [ -d /tmp/cutsite/cutensor/lib ]; then
    export LD_LIBRARY_PATH=/tmp/cutsite/cutensor/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 EINKERN_CACHE_DIR=${EINKERN_CACHE_DIR:-/tmp/ekc-suite}
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
peers="torch.einsum,cuTENSOR,cupy.einsum,cuBLAS (torch.matmul)"
work=$(mktemp -d /tmp/einkern-suite.XXXXXX)
if [ "$mode" = calibrate ]; then
    # the drawn cases only matter here; the suite limit keeps the call under 8 minutes
    timeout 460 python3 -m einkern bench contractions --backend cuda --seed "$seed" \
        --count "${2:-40}" --runs 5 --warmup 1 --row-budget 2 --peers torch.einsum \
        --suite-timeout contractions=400 --calibrate "$OUT/calibration-$seed.jsonl" \
        --out "$work" > "$OUT/calibration-$seed.log" 2>&1
    status=$?
    echo "einkern bench exit $status"
    echo "calibration records: $(wc -l < "$OUT/calibration-$seed.jsonl" 2>/dev/null || echo 0)"
    tail -12 "$OUT/calibration-$seed.log"
    exit "$status"
fi
# Back in $OUT/suite-SEED (the device tool returns at most 8 files): results.json,
# results.md, contractions.json, contractions.md (the per-case table), log.txt.
out=$OUT/suite-$seed
mkdir -p "$out"
# COUNT drawn cases (default 120) + 11 named shapes; a case past the suite limit is
# recorded as skipped, and the report says how many.
timeout 470 python3 -m einkern bench contractions --backend cuda --seed "$seed" \
    --count "${2:-120}" --runs 5 --warmup 1 --row-budget 2 --peers "$peers" \
    --suite-timeout contractions=400 --out "$work" > "$work/stdout.txt" 2> "$out/log.txt"
status=$?
cp "$work"/results.json "$work"/results.md "$work"/contractions.* "$out"/ 2>/dev/null
cat "$work/stdout.txt" >> "$out/log.txt"
echo "einkern bench exit $status"
grep -E "unavailable|suite contractions|SIMT|failed" "$out/log.txt" | head -8
python3 - "$out" <<'EOF'
import json, sys
try:
    calibration = json.load(open(f"{sys.argv[1]}/results.json"))["calibration"]
except (OSError, ValueError, KeyError) as error:
    sys.exit(f"no results.json: {error}")
simt = ", ".join(f"{k} {v / 1e12:.1f}" for k, v in calibration.get("simt_peak", {}).items())
peak = ", ".join(f"{k} {v / 1e12:.1f}" for k, v in calibration["peak"].items())
print(f"copy {calibration['bandwidth'] / 1e12:.2f} TB/s; SIMT peak TFLOP/s: {simt}; "
      f"cuBLAS TFLOP/s: {peak}")
EOF
# the class table and the model's correlation: the last lines of the output
sed -n '/^## contractions/,$p' "$work/stdout.txt"
exit "$status"
