#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py and scripts/gpu_phases.py): 2 GRPO steps of the hf-engine path on a
# Qwen2.5-VL with the real 3B shape (random bf16-compute weights, 64 frames at 448x448, gradient
# checkpointing), then FSDP2 at world size 1 on NCCL (sharded load, refresh gather, DCP round trip),
# packed against padded log-probs, and vLLM sleep -> in-memory refresh -> generate with the parity
# check (skipped without vLLM): one JSON line per phase with its time, tokens/s, peak GPU memory and
# ok/skip. At most 8 minutes on one GPU. --phases picks phases; --cpu-smoke runs the CPU ones small.
#
# Needs a Python with torch and transformers (the GPU machine's own); vLLM and flash-attn where installed. videorl's
# sources are used from this checkout (no install). Every other package the check imports is listed in scripts/gpu-wheels.txt (PyAV, Pillow, click, pluggy, torchvision, ...): a line
# whose module is missing is installed from its wheel in WHEELS (scripts/gpu-wheels.sh downloads them;
# carry the folder with the checkout: the GPU machine reaches no package index). Extra arguments go to
# gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-scripts/gpu-wheels}
missing=$("$PYTHON" - scripts/gpu-wheels.txt <<'PY'
import importlib.util, sys
lines = [line.split() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")]
print(" ".join(pin for pin, module in lines if importlib.util.find_spec(module) is None))
PY
)
if [ -n "$missing" ]; then
    if [ ! -d "$WHEELS" ]; then
        echo "gpu-check: missing Python packages: $missing; put their wheels in $WHEELS (scripts/gpu-wheels.sh)" >&2
        exit 2
    fi
    "$PYTHON" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" \
        --target "${TMPDIR:-/tmp}/videorl-gpu-deps" $missing
    export PYTHONPATH="${TMPDIR:-/tmp}/videorl-gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec timeout 480 "$PYTHON" scripts/gpu_check.py "$@"
