#!/usr/bin/env bash
# The GPU benchmark: `einkern bench` on the CUDA backend.
#
#   scripts/bench_gpu.sh                 # every suite
#   scripts/bench_gpu.sh gemm ccsdt      # some suites
#   BENCH_ARGS="--quick" scripts/bench_gpu.sh all   # extra options for einkern bench
#
# Wheels carried in .whl/ (packages the GPU image lacks) are installed first
# into /tmp/site.  Results go to $OUT/bench (./bench-out/bench without $OUT):
# results.json, results.csv, results.md, log.txt and figures.tar.gz (the PNGs;
# the device tool returns at most 8 files).  The Markdown table is printed
# last.  Suite time limits keep the whole run near 8 minutes; cases past a
# limit are recorded as skipped, never silently dropped.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
out=${OUT:-$PWD/bench-out}/bench
work=$(mktemp -d /tmp/einkern-bench.XXXXXX)
mkdir -p "$out"
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(all)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
# shellcheck disable=SC2086 # BENCH_ARGS is split on purpose
python3 -m einkern bench "${suites[@]}" --backend cuda --out "$work" \
    --suite-timeout "gemm=170,nekbone=50,ccsdt=150,riemann=30,mapped=30" \
    --row-budget 8 ${BENCH_ARGS:-} 2>&1 | tee "$out/log.txt"
status=${PIPESTATUS[0]}
cp "$work"/results.* "$out"/ 2>/dev/null
if compgen -G "$work/*.png" >/dev/null; then
    tar -czf "$out/figures.tar.gz" -C "$work" $(cd "$work" && ls ./*.png)
fi
exit "$status"
