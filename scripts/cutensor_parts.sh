#!/usr/bin/env bash
# Prepare the cuTENSOR wheel for the GPU machine, which cannot download it and whose
# calls carry at most 64 MiB: download cutensor-cu13 (about 210 MB) here and split
# it into four parts, .cut1 ... .cut4 (ignored by git).  Then, on the device, carry
# .cut1, .cut2, .cut3 in three quick calls (the machine keeps /tmp while warm), each
#     mkdir -p /tmp/cut && cp .cutN/* /tmp/cut/
# and finish with a call carrying .cut4 and .whl that runs
#     bash scripts/gpu_cutensor.sh [SUITE...]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 -d "$work" cutensor-cu13
wheel=$(ls "$work"/cutensor_cu13-*.whl)
split -b 53M -d -a 1 "$wheel" "$work/part"
for n in 0 1 2 3; do
  rm -rf ".cut$((n + 1))"; mkdir -p ".cut$((n + 1))"
  mv "$work/part$n" ".cut$((n + 1))/"
done
basename "$wheel" > .cut4/NAME
ls -la .cut1 .cut2 .cut3 .cut4
