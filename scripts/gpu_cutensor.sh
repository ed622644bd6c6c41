#!/usr/bin/env bash
# On the GPU machine, after the parts of scripts/cutensor_parts.sh reached /tmp/cut
# (.cut4 carried with this call): join and install cuTENSOR, then run the benchmark
# suites with it as a peer.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
cp .cut4/part3 /tmp/cut/ || exit 2
name=$(cat .cut4/NAME)
cat /tmp/cut/part0 /tmp/cut/part1 /tmp/cut/part2 /tmp/cut/part3 > "/tmp/$name" || exit 2
python3 -m pip install -q --no-deps --no-index --target /tmp/cutsite "/tmp/$name" || exit 2
export LD_LIBRARY_PATH=/tmp/cutsite/cutensor/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 -c "import ctypes; ctypes.CDLL('libcutensor.so.2'); print('libcutensor.so.2 loads')" || exit 2
bash scripts/bench_gpu.sh "$@"
