#!/usr/bin/env bash
# Download the wheels of scripts/gpu-wheels.txt for the GPU machine (CPython 3.12, manylinux x86_64)
# into scripts/gpu-wheels/, for scripts/gpu-check.sh to install where a module is missing.
# torchvision's version must match the machine's torch (0.26.0 for torch 2.11).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
mapfile -t pins < <(grep -v '^#' scripts/gpu-wheels.txt | awk 'NF {print $1}')
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d scripts/gpu-wheels "${pins[@]}"
du -sh scripts/gpu-wheels
