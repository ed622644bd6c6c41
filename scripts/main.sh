#!/bin/sh
# The main job on a fresh machine (README command 1): make .venv, install einkern,
# then run every example (the C loop nests included, at the sizes their
# `#pragma einkern sizes` gives) on random inputs, timed and checked against the
# NumPy reference.  The CUDA backend's wheels (the [cuda] extra, ~170 MB) are added only
# where they can be used: when `nvidia-smi -L` lists a GPU, or when EINKERN_CUDA=1
# asks for them (EINKERN_CUDA=0 leaves them out).  Arguments are passed to
# `einkern run` (e.g. --backend cpu, --repeat 10).  EINKERN_DRY_RUN=1 prints the
# commands instead of running them.
set -eu
cd "$(dirname "$0")/.."

case "${EINKERN_CUDA:-auto}" in
    1) cuda=yes why="EINKERN_CUDA=1" ;;
    0) cuda=no why="EINKERN_CUDA=0" ;;
    *)
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
            cuda=yes why="nvidia-smi -L lists a GPU"
        else
            cuda=no why="no GPU found by nvidia-smi -L; EINKERN_CUDA=1 installs it anyway"
        fi
        ;;
esac

step() {
    if [ "${EINKERN_DRY_RUN:-0}" = 1 ]; then echo "$*"; else "$@"; fi
}

step python3 -m venv .venv
if [ "$cuda" = yes ]; then
    echo "einkern: installing einkern with the CUDA backend ($why)" >&2
    step .venv/bin/pip install -q -e '.[cuda]'
else
    echo "einkern: installing einkern with the C/OpenMP backend only ($why)" >&2
    step .venv/bin/pip install -q -e .
fi
step .venv/bin/einkern run examples/*.ein examples/*.tensor examples/*.mapped examples/*.c \
    --check --repeat 3 "$@"
