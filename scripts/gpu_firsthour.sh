#!/usr/bin/env bash
# For the lead, on an H100 (< 2 min): `einkern run --backend cuda` now times the
# kernels on device-resident arrays (CUDA events after a warm-up, median) and
# reports the copies apart.  Runs local_grad3 (the example's new default,
# nelt = 4096, and the old 32768 that took 568 ms with copies), gemm and
# sd_t_d1_1, each with --check; cross-checks local_grad3 at 32768 against
# CudaExecutable.profile on torch arrays (each kernel's median); checks that a
# forced progress line reaches stderr.  Logs under $OUT; a short table last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} EINKERN_CACHE_DIR=/tmp/ekc PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpu.txt" 2>&1

run() {  # NAME PROGRAM [ARGS...]
  local name=$1; shift
  timeout 120 python3 -m einkern run "$@" --backend cuda --check --repeat 20 \
    > "$OUT/$name.txt" 2> "$OUT/$name.err"
  echo "$name exit $?" >> "$OUT/exits.txt"
}
run local_grad3_4096 examples/local_grad3.ein
run local_grad3_32768 examples/local_grad3.ein -e nelt=32768
run gemm examples/gemm.ein
run sd_t_d1_1 examples/sd_t_d1_1.ein
timeout 60 python3 - > "$OUT/kernel_times_32768.txt" 2>&1 <<'PY'
# An independent measurement: torch arrays, CudaExecutable.profile (each kernel's
# median of 20 launches after a warm-up, CUDA events).
import einkern
from einkern.bench.cuda_device import CudaDevice

kernel = einkern.compile("examples/local_grad3.ein", backend="cuda", nelt=32768)
problem, device = kernel.problem, CudaDevice()
arrays = device.random_inputs(problem, seed=0)
for tensor in problem.program.tensors:
    if tensor.name not in arrays:
        arrays[tensor.name] = device.empty(problem.shape(tensor.name), tensor.dtype, tensor.layout)
times = kernel.executable.profile(arrays, {}, repeat=20)
print("per kernel (ms):", ", ".join(f"{t:.4f}" for t in times), f"sum {sum(times):.4f} ms")
PY
echo "profile exit $?" >> "$OUT/exits.txt"
timeout 120 python3 -m einkern run examples/local_grad3.ein -e nelt=32768 --backend cuda \
  --repeat 200 --progress > /dev/null 2> "$OUT/progress.err"
echo "progress exit $? ($(tr '\r' '\n' < "$OUT/progress.err" | grep -c 'einkern run') lines drawn)" \
  >> "$OUT/exits.txt"

cat "$OUT/gpu.txt"
cat "$OUT/exits.txt"
for name in local_grad3_4096 local_grad3_32768 gemm sd_t_d1_1; do
  echo "== $name"; cat "$OUT/$name.txt"; tail -3 "$OUT/$name.err"
done
echo "== profile of local_grad3 nelt=32768 on torch arrays (the sum should be close)"
tail -6 "$OUT/kernel_times_32768.txt"
