#!/bin/bash
# gemv N (z[i] = alpha * sum_j A[i,j] x[j], A row-major) on a GPU: the default
# mapping (reduction lanes) against the old choice (8 rows per warp, reduction
# threads the slowest digits) and the widest lanes point (one warp per row,
# 16-byte runs, 4 accumulators), n = 8192 and 16384, fp64 and fp32; then the
# BLAS suite against cuBLAS.  The default runs the loop nest einkern.blas.gemv
# compiles (its two statements fuse into one); the other mappings the same
# statement as Einstein notation (whose own default, fp64 n = 16384, is an MMA
# point: a separate issue).  Usage: scripts/gpu_gemv_lanes.sh [OUT]
set -euo pipefail
out=${1:-gemv-lanes-out}
mkdir -p "$out"
ek="python -m einkern"
for dtype in float64 float32; do
  v=$([ $dtype = float32 ] && echo 4 || echo 2)
  acc=$([ $dtype = float32 ] && echo ', "accumulate": "wide"' || echo '')
  for n in 8192 16384; do
    t=$([ $dtype = float32 ] && echo float || echo double)
    c="$out/gemv_${dtype}.c"
    printf 'void gemv(int m, int n, %s alpha, %s A[m][n], %s x[n], %s z[m]) {\n  for (int i = 0; i < m; i++) {\n    z[i] = 0;\n    for (int j = 0; j < n; j++)\n      z[i] += alpha * A[i][j] * x[j];\n  }\n}\n' $t $t $t $t > "$c"
    p="$out/gemv_${dtype}_$n.ein"
    printf 'dims m = %d, n = %d\ndtype %s\nscalar alpha = 1.5\ntensor z[m], A[m, n], x[n]\nz[i] = alpha * A[i,j] * x[j]\n' $n $n $dtype > "$p"
    base='"grid_order": ["i"], "reduction_order": ["j"], "boundary": "exact", "vector_width": '$v$acc
    echo "{\"strategy\": \"direct\", \"parallel\": [{\"index\": \"i\", \"tile\": 8, \"threads\": 8}], $base, \"reduction_threads\": [[\"j\", 32]]}" > "$out/old_${dtype}_$n.json"
    echo "{\"strategy\": \"register\", \"parallel\": [{\"index\": \"i\", \"tile\": 16, \"threads\": 8}], $base, \"reduction_threads\": [[\"j\", 32]], \"reduction_fastest\": true, \"reduction_chunk\": $v, \"accumulators\": 4}" > "$out/wide_${dtype}_$n.json"
    echo "== $dtype n=$n"
    $ek emit "$c" -b cuda --explain --resources --arch sm_90 -e m=$n -e n=$n | grep '^//' | grep -v EKX
    echo "-- default"; $ek run "$c" -b cuda -e m=$n -e n=$n --repeat 50
    for m in old wide; do
      echo "-- $m"; $ek run "$p" -b cuda --mapping "$out/${m}_${dtype}_$n.json" --repeat 50
    done
  done
done 2>&1 | tee "$out/log.txt"
$ek bench blas --backend cuda --out "$out/bench" 2>&1 | tee -a "$out/log.txt"
