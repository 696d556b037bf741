"""Registration: every adapter is registered lazily and satisfies the interface."""

from __future__ import annotations

import subprocess
import sys

from videorl.api import Benchmark
from videorl.plugins import load_plugins
from videorl_benchmarks.plugin import BENCHMARKS


def test_all_benchmarks_registered_with_their_own_names() -> None:
    plugins = load_plugins()
    registered = set(plugins.benchmarks.by_origin("videorl-benchmarks"))
    assert registered == set(BENCHMARKS)
    assert len(registered) == 24  # the 22 of the paper + Video-MME with subtitles + MMVU with open-ended
    for name in BENCHMARKS:
        bench = plugins.benchmarks.create(name)
        assert isinstance(bench, Benchmark)
        assert bench.name == name
    assert plugins.benchmarks.canonical("videomme") == "video-mme"
    assert plugins.benchmarks.canonical("VSIBench") == "vsi-bench"


def test_registration_imports_no_adapter() -> None:
    code = (
        "import sys; from videorl.plugins import load_plugins; load_plugins(); "
        "print(sorted(m for m in sys.modules if m.startswith('videorl_benchmarks.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['videorl_benchmarks.plugin']"
