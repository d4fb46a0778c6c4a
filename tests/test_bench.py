"""The benchmark harness's accounting: useful flops and the target numba compiles for.

Timings are never asserted (benchmarks are not tests); what is checked is what the numbers
are divided by, and what the harness says it compiled for.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from spinsa import bench


def test_dynamics_flops_count_each_pair_once():
    # per ordered pair i != j and sample: y = J_ij x_j (d^2 multiply-adds), the score x_i . y
    # and the field's alpha_ij y (d multiply-adds each)
    P, N, d, T = 3, 5, 4, 2
    per_pair = 2 * d * d + 2 * d + 2 * d
    assert bench.dynamics_flops(P, N, d, T) == T * P * N * (N - 1) * per_pair
    # at d = 8 the old 4 d^2 count is 1.6 times the useful work (with N^2 for N (N - 1))
    ratio = 4 * 196**2 * 64 / bench.dynamics_flops(1, 196, 8)
    assert ratio == pytest.approx(256 / 160 * 196 / 195)


def test_objective_flops_and_the_timing_of_both_counts():
    P, N, d = 2, 4, 3
    assert bench.objective_flops(P, N, d) == P * N * (N - 1) * (4 * d * d + 3 * d)
    t = bench.timing("x", 2.0, 8e9, P=10, N=4, d=3, n=5)
    assert t.gflops == pytest.approx(4.0)
    assert t.gflops_old == pytest.approx(5 * 4 * 10 * 16 * 9 / 2.0 / 1e9)


def _target_in_subprocess(env: dict) -> dict:
    code = "import json; from spinsa import bench; print(json.dumps(bench.compile_target()))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_compile_target_describes_this_process():
    target = bench.compile_target()
    assert target["cpu"] and isinstance(target["features"], list)
    assert target["vector_bits"] in (0, 128, 256, 512)
    if "avx512f" in target["features"]:
        assert target["vector_bits"] == 512  # spinsa lifts LLVM's 256-bit preference
    elif "avx2" in target["features"]:
        assert target["vector_bits"] == 256


@pytest.mark.skipif(
    "avx2" not in bench.compile_target()["features"], reason="needs an x86 CPU with AVX2"
)
def test_numba_cpu_name_and_features_are_honoured():
    # what the issue tracker suggests for timing AVX2 code on an AVX-512 machine
    features = "+avx2,+avx,+fma,+sse4.2,+sse4.1,+ssse3,+sse3,+sse2,+sse,-avx512f"
    target = _target_in_subprocess({"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": features})
    assert target["cpu"] == "haswell" and target["cpu_from_env"]
    assert "avx512f" not in target["features"] and "avx2" in target["features"]
    assert target["vector_bits"] == 256


def test_bench_prints_the_target_and_useful_flops(capsys, tmp_path):
    from spinsa.cli import main

    path = tmp_path / "bench.json"
    assert main(["bench", "--only", "async", "--quick", "--no-plain", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "compiled for: " in out and "-bit vectors" in out
    assert "of matmul peak in useful flops" in out and "old 4 P N^2 d^2 count" in out
    record = json.loads(path.read_text())
    assert record["compile_target"]["vector_bits"] in (0, 128, 256, 512)
    fast = record["benchmarks"][0]["fast"]
    flops = bench.dynamics_flops(64, 196, 8)
    assert fast["gflops"] == pytest.approx(flops / fast["seconds"] / 1e9)
    assert fast["gflops_old"] / fast["gflops"] == pytest.approx(4 * 64 * 196**2 * 64 / flops)
    assert np.isfinite(fast["seconds"])


def test_plain_hebbian_spectra_are_the_coupling_spectrum(rng):
    # the bench's former way and the batched one compute the same spectra
    from spinsa.analysis import coupling_spectrum

    J = rng.standard_normal((5, 5, 3, 3))
    ev, sv, sym, blocks = bench.plain_hebbian_spectra(J)
    sp = coupling_spectrum(J)
    np.testing.assert_allclose(np.sort_complex(sp.eigenvalues), np.sort_complex(ev), atol=1e-12)
    np.testing.assert_allclose(sp.singular_values, sv, atol=1e-12)
    np.testing.assert_allclose(sp.symmetric_eigenvalues, sym[::-1], atol=1e-12)
    np.testing.assert_allclose(sp.block_singular_values, blocks, atol=1e-12)
    res = bench.bench_hebbian(P=10, N=6, d=3)
    assert res["fast"].seconds > 0 and res["plain"].seconds > 0


def test_small_calls_have_their_own_target_and_a_measured_fixed_cost(rng):
    def pair(fast, plain):
        return {"fast": bench.Timing("f", fast, 1.0), "plain": bench.Timing("p", plain, 1.0)}

    runs = [
        ("dynamics: N=196, d=8, P=1000, T=20, float32", pair(1.0, 21.0), "ratio"),
        ("dynamics, a small call: N=196, d=8, P=256, T=5, float32", pair(1.0, 9.0), "ratio"),
    ]
    verdicts = dict(bench.speed_targets(runs))
    assert verdicts == {
        "dynamics >= 20x plain torch: 21x -- met": True,
        "dynamics at P = 256, T = 5 >= 10x plain torch: 9x -- NOT met": False,
    }
    with_peak = dict(bench.speed_targets(runs, peak=1.6))  # 1 useful GFLOP/s: 62.5 %
    assert with_peak["dynamics >= 60 % of the matmul peak: 62.5 % -- met"] is True
    assert len(with_peak) == 3  # the small call has no target in fractions of the peak
    x = rng.standard_normal((40, 5, 3)).astype(np.float32)  # the generic path: compiled already
    J = rng.standard_normal((5, 5, 3, 3)).astype(np.float32)
    fixed = bench.call_fixed_cost(x / np.linalg.norm(x, axis=-1, keepdims=True), J, repeat=2)
    assert np.isfinite(fixed) and fixed >= 0


def test_bench_takes_the_larger_of_two_matmul_peaks(capsys, tmp_path, monkeypatch):
    """A peak measured while something else ran is half the machine's: the bench measures it
    before and after the benchmarks and divides by the larger."""
    from spinsa.cli import main

    peaks = iter([50.0, 100.0])
    monkeypatch.setattr(bench, "matmul_peak", lambda device="cpu", coretype=None: next(peaks))
    path = tmp_path / "bench.json"
    assert main(["bench", "--only", "async", "--quick", "--no-plain", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "matmul peak again, after the benchmarks: 100.0 GFLOP/s" in out
    assert "the fractions below use the larger, 100.0" in out
    assert json.loads(path.read_text())["matmul_peak_gflops"] == 100.0


@pytest.mark.parametrize(
    "bits, core, want",
    [
        (512, "Haswell", "SkylakeX"),  # Zen 5 with OpenBLAS 0.3.31: 256-bit kernels
        (512, "Zen", "SkylakeX"),
        (256, "SkylakeX", "Haswell"),  # an AVX2 machine emulated on an AVX-512 CPU
        (256, "SapphireRapids", "Haswell"),
        (256, "Haswell", None),
        (512, "SkylakeX", None),
        (512, None, None),  # another BLAS: its own kernels
        (128, "NEOVERSEN1", None),
        (128, "Haswell", None),  # no OpenBLAS core type of that width to ask for
    ],
)
def test_the_peak_is_measured_with_kernels_of_the_compiled_width(bits, core, want):
    assert bench.peak_coretype(bits, core) == want


def test_a_peak_measured_with_other_kernels_in_a_fresh_process():
    core = bench.blas_core()
    if core is None:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    peak = bench.matmul_peak(n=128, repeat=1, coretype=core)
    assert np.isfinite(peak) and peak > 0


@pytest.fixture
def zen5_with_haswell_blas(monkeypatch):
    """numba's code 512-bit, OpenBLAS on its 256-bit Haswell kernels (Zen 5, OpenBLAS 0.3.31)."""
    monkeypatch.setattr(bench, "blas_core", lambda: "Haswell")
    target = dict(cpu="znver5", cpu_from_env=False, features=["avx512f"], vector_bits=512)
    monkeypatch.setattr(bench, "compile_target", lambda: target)


def test_bench_names_the_blas_kernels_of_its_peak(
    capsys, tmp_path, monkeypatch, zen5_with_haswell_blas
):
    """Where OpenBLAS runs kernels narrower than numba's code, the peak comes from a process
    with kernels of the code's width, and the header says so."""
    from spinsa.cli import main

    asked = []
    monkeypatch.setattr(bench, "matmul_peak", lambda device="cpu", coretype=None: asked.append(
        coretype) or 400.0)  # fmt: skip
    path = tmp_path / "bench.json"
    assert main(["bench", "--only", "async", "--quick", "--no-plain", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert asked == ["SkylakeX", "SkylakeX"]
    assert "OpenBLAS's SkylakeX kernels" in out and "OPENBLAS_CORETYPE=SkylakeX" in out
    assert "chose its Haswell kernels" in out
    assert json.loads(path.read_text())["matmul_peak_openblas_core"] == "SkylakeX"


def test_bench_falls_back_to_its_own_blas_where_the_other_kernels_fail(
    capsys, monkeypatch, zen5_with_haswell_blas
):
    from spinsa.cli import main

    def peak(device="cpu", coretype=None):
        if coretype:
            raise subprocess.CalledProcessError(1, "python", stderr="Illegal instruction")
        return 100.0

    monkeypatch.setattr(bench, "matmul_peak", peak)
    assert main(["bench", "--only", "async", "--quick", "--no-plain"]) == 0
    out = capsys.readouterr().out
    assert "OPENBLAS_CORETYPE=SkylakeX failed (Illegal instruction)" in out
    assert "OpenBLAS's Haswell kernels, 2048^2): 100.0" in out
