#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py): 3 GRPO steps of the hf-engine path on a Qwen2.5-VL with the
# real 3B shape (random bf16-compute weights, 64 frames at 448x448, gradient checkpointing), printed
# as one JSON line: step time, tokens/s and peak GPU memory per stage. At most 8 minutes on one GPU.
#
# Needs a Python with torch and transformers (the GPU machine's own); vLLM is not used. videorl's
# sources are used from this checkout (no install). The few pure-Python packages videorl imports
# beyond those (pluggy, jinja2 and its markupsafe, PyYAML) are installed from WHEELS when missing:
#   pip download --only-binary=:all: --dest scripts/gpu-wheels pluggy jinja2 markupsafe pyyaml
# (a few MB; carry the folder with the checkout). Extra arguments go to gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-scripts/gpu-wheels}
missing=$("$PYTHON" - <<'PY'
import importlib.util
need = {"pluggy": "pluggy", "jinja2": "jinja2", "yaml": "pyyaml"}  # module: distribution
print(" ".join(dist for module, dist in need.items() if importlib.util.find_spec(module) is None))
PY
)
if [ -n "$missing" ]; then
    if [ ! -d "$WHEELS" ]; then
        echo "gpu-check: missing Python packages: $missing; put their wheels in $WHEELS (see the header)" >&2
        exit 2
    fi
    "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" --target "${TMPDIR:-/tmp}/videorl-gpu-deps" $missing
    export PYTHONPATH="${TMPDIR:-/tmp}/videorl-gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec timeout 480 "$PYTHON" scripts/gpu_check.py "$@"
