"""The kernels compiled for 256-bit vectors (AVX2) against the plain formulas, on any x86 CPU.

The package's kernels are tuned where LLVM emits 512-bit code; users' machines often have
256-bit vectors only. A fresh interpreter with numba's target restricted to a Haswell-class
CPU (AVX2 + FMA, every AVX-512 feature off) and a cache directory of its own compiles them
for 256-bit vectors and runs ``tests/simd_check.py``: the dynamics (both paths, clamps, the
updates, the asynchronous sweep, attention), the objective and its gradient, and the
sampling kernels, in float64, against numpy to 1e-10.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import spinsa

TESTS = Path(__file__).resolve().parent
ROOT = Path(spinsa.__file__).resolve().parent.parent  # where this run imports spinsa from


def avx2_features() -> str:
    """``NUMBA_CPU_FEATURES`` for this host with every AVX-512 feature turned off; skips the
    test where the host cannot run AVX2 + FMA code (other architectures, older x86)."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    if not (features.get("avx2") and features.get("fma")):
        pytest.skip("the host cannot run AVX2 + FMA code")
    return ",".join(
        ("+" if on and not name.startswith("avx512") else "-") + name
        for name, on in features.items()
    )


@pytest.mark.slow
def test_kernels_compiled_for_256_bit_vectors_match_the_plain_formulas(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(
        NUMBA_CPU_NAME="haswell",
        NUMBA_CPU_FEATURES=avx2_features(),
        NUMBA_CACHE_DIR=str(tmp_path),  # never reuse code compiled for another target
        PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]),
    )
    proc = subprocess.run(
        [sys.executable, str(TESTS / "simd_check.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    target = result["target"]
    assert target["cpu"] == "haswell" and target["vector_bits"] == 256, target
    assert "avx512f" not in target["features"] and result["vector registers"] == 16
    assert result["pairs per block"] == 2
    assert not result["zmm in pair loops"], "the kernels' pair loops use 512-bit registers"
    errors = result["errors"]
    assert len(errors) >= 19, sorted(errors)  # every kernel above reported
    worse = {name: err for name, err in errors.items() if not err <= 1e-10}
    assert not worse, f"kernels off their plain formulas (max relative error): {worse}"
