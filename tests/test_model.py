"""The model of docs/model.md against plain-numpy formulas and its physical invariants."""

import numpy as np
import pytest
from reference import attention as ref_attention
from reference import local_fields as ref_fields
from reference import random_system
from reference import site_energies as ref_energies
from reference import step as ref_step
from scipy.stats import special_ortho_group

import spinsa

SHAPES = [(1, 2, 1), (3, 5, 4), (2, 7, 3), (130, 4, 2)]  # P > TILE exercises padded tiles


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("lam", [0.3, 2.5])
def test_functions_match_plain_numpy_in_float64(rng, shape, lam):
    x, J = random_system(rng, *shape)
    np.testing.assert_allclose(
        spinsa.local_fields(x, J, lam), ref_fields(x, J, lam), rtol=1e-10, atol=1e-13
    )
    np.testing.assert_allclose(
        spinsa.site_energies(x, J, lam), ref_energies(x, J, lam), rtol=1e-10, atol=1e-13
    )
    np.testing.assert_allclose(spinsa.energy(x, J, lam), ref_energies(x, J, lam).sum(1), rtol=1e-10)
    np.testing.assert_allclose(
        spinsa.attention(x, J, lam), ref_attention(x, J, lam), rtol=1e-10, atol=1e-15
    )


@pytest.mark.parametrize("norm", ["sphere", "layernorm", "none"])
@pytest.mark.parametrize("shape", SHAPES)
def test_step_matches_plain_numpy(rng, norm, shape):
    x, J = random_system(rng, *shape, unit=False)
    np.testing.assert_allclose(
        spinsa.step(x, J, 1.7, gamma=0.6, norm=norm),
        ref_step(x, J, 1.7, 0.6, norm),
        rtol=1e-10,
        atol=1e-12,
    )


def test_float32_agrees_with_float64(rng):
    x, J = random_system(rng, P=140, N=9, d=5)
    x32, J32 = x.astype(np.float32), J.astype(np.float32)
    assert spinsa.local_fields(x32, J32, 2.0).dtype == np.float32
    for f in [spinsa.local_fields, spinsa.site_energies, spinsa.attention]:
        np.testing.assert_allclose(f(x32, J32, 2.0), f(x, J, 2.0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(spinsa.step(x32, J32, 2.0), spinsa.step(x, J, 2.0), atol=1e-5)


def numerical_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("site", [0, 3])
def test_field_is_minus_gradient_of_own_site_energy(rng, site):
    x, J = random_system(rng, P=2, N=6, d=3)
    h = spinsa.local_fields(x, J, 3.0)

    def e_site(xs):
        return spinsa.site_energies(xs, J, 3.0)[:, site].sum()

    g = numerical_grad(e_site, x)[:, site]
    np.testing.assert_allclose(h[:, site], -g, rtol=1e-6, atol=1e-8)


def test_energy_is_rotation_invariant(rng):
    x, J = random_system(rng, P=4, N=6, d=5)
    R = special_ortho_group.rvs(5, random_state=1)
    xr = x @ R.T
    Jr = np.einsum("ab,ijbc,dc->ijad", R, J, R)
    np.testing.assert_allclose(spinsa.energy(xr, Jr, 2.0), spinsa.energy(x, J, 2.0), rtol=1e-10)
    np.testing.assert_allclose(
        spinsa.local_fields(xr, Jr, 2.0),
        spinsa.local_fields(x, J, 2.0) @ R.T,
        rtol=1e-9,
        atol=1e-12,
    )


def test_attention_rows_sum_to_one_with_zero_diagonal(rng):
    x, J = random_system(rng, P=3, N=8, d=4, scale=5.0)
    a = spinsa.attention(x, J, 10.0)
    np.testing.assert_allclose(a.sum(axis=2), 1.0, rtol=1e-12)
    assert np.all(a[:, np.arange(8), np.arange(8)] == 0)
    assert np.all(a >= 0)


def test_sphere_step_returns_unit_spins(rng):
    x, J = random_system(rng, P=5, N=6, d=4, unit=False)
    n = np.linalg.norm(spinsa.step(x, J, 1.0, norm="sphere"), axis=-1)
    np.testing.assert_allclose(n, 1.0, rtol=1e-12)


def test_layernorm_step_has_zero_mean_unit_variance(rng):
    x, J = random_system(rng, P=5, N=6, d=6, unit=False)
    y = spinsa.step(x, J, 1.0, norm="layernorm")
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)


def test_single_hebbian_pattern_is_a_fixed_point(rng):
    xi = random_system(rng, P=1, N=10, d=4)[0]
    J = spinsa.hebbian_couplings(xi)
    for lam in [1.0, 5.0]:
        np.testing.assert_allclose(spinsa.step(xi, J, lam), xi, atol=1e-12)
    traj = spinsa.run(xi, J, 1.0, steps=5)
    np.testing.assert_allclose(traj.final, xi, atol=1e-12)


def test_large_lam_and_zero_spins_stay_finite(rng):
    x, J = random_system(rng, P=3, N=6, d=4, dtype=np.float32)
    J = J / np.abs(J).max() * 0.25  # |s| <= 1 for unit spins
    x[:, 2] = 0.0  # a masked token
    x[1] = 0.0  # a fully masked sample
    for f in [spinsa.local_fields, spinsa.site_energies, spinsa.attention]:
        out = f(x, J, 100.0)
        assert np.isfinite(out).all(), f.__name__
    ref = ref_fields(x.astype(np.float64), J.astype(np.float64), 100.0)
    np.testing.assert_allclose(spinsa.local_fields(x, J, 100.0), ref, rtol=1e-3, atol=1e-5)
    traj = spinsa.run(x, J, 100.0, steps=3)
    assert np.isfinite(traj.states).all() and np.isfinite(traj.energies).all()


def test_run_records_times_energies_and_calls_back(rng):
    x, J = random_system(rng, P=3, N=5, d=3)
    seen = []
    traj = spinsa.run(x, J, 2.0, steps=7, record_every=3, callback=lambda t, s: seen.append(t))
    np.testing.assert_array_equal(traj.times, [0, 3, 6, 7])
    assert traj.states.shape == (4, 3, 5, 3)
    assert seen == list(range(1, 8))
    xs = [x]
    for _ in range(7):
        xs.append(ref_step(xs[-1], J, 2.0))
    np.testing.assert_allclose(traj.states, np.stack([xs[t] for t in traj.times]), atol=1e-12)
    energies = np.stack([ref_energies(s, J, 2.0).sum(1) for s in xs])
    np.testing.assert_allclose(traj.energies, energies, rtol=1e-10)
    assert traj.config == spinsa.DynamicsConfig(lam=2.0)


@pytest.mark.parametrize(("update", "device"), [("sync", None), ("async", None), ("sync", "cpu")])
def test_zero_steps_is_the_start_state_and_its_energy(update, device, rng):
    """steps=0 is accepted, as documented: nothing runs, the trajectory is x0 at t = 0."""
    if device is not None:
        pytest.importorskip("torch")
    x, J = random_system(rng, P=3, N=5, d=3)
    traj = spinsa.run(x, J, 2.0, steps=0, update=update, seed=1, device=device)
    np.testing.assert_array_equal(traj.times, [0])
    assert traj.n_steps == 0 and traj.states.shape == (1, 3, 5, 3)
    np.testing.assert_array_equal(traj.final, x)
    np.testing.assert_allclose(traj.energies, ref_energies(x, J, 2.0).sum(1)[None], rtol=1e-10)


def test_async_sweep_updates_one_site_at_a_time(rng):
    x, J = random_system(rng, P=3, N=5, d=3)
    order = np.random.default_rng(7).permutation(5)
    expected = x.copy()
    for i in order:
        h = ref_fields(expected, J, 1.5)[:, i]
        y = h + 0.8 * expected[:, i]
        expected[:, i] = y / np.linalg.norm(y, axis=-1, keepdims=True)
    got = spinsa.async_sweep(x, J, 1.5, gamma=0.8, rng=np.random.default_rng(7))
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_async_sweep_reports_and_replays_its_site_order(rng):
    x, J = random_system(rng, P=2, N=6, d=3)
    got, order = spinsa.async_sweep(x, J, 1.2, rng=5, return_order=True)
    np.testing.assert_array_equal(order, np.random.default_rng(5).permutation(6))
    expected = x.copy()  # the sites one at a time, in the order reported
    for i in order:
        y = ref_fields(expected, J, 1.2)[:, i] + expected[:, i]
        expected[:, i] = y / np.linalg.norm(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # a given order is used as is (and the rng is then unused)
    reverse = order[::-1]
    again, used = spinsa.async_sweep(x, J, 1.2, order=reverse, return_order=True)
    np.testing.assert_array_equal(used, reverse)
    assert not np.allclose(again, got)
    with pytest.raises(ValueError, match="permutation of the 6 sites"):
        spinsa.async_sweep(x, J, 1.2, order=[0, 0, 1, 2, 3, 4])


def test_async_run_is_seeded(rng):
    x, J = random_system(rng, P=2, N=6, d=3)
    a = spinsa.run(x, J, 1.0, 4, update="async", seed=3)
    b = spinsa.run(x, J, 1.0, 4, update="async", seed=3)
    c = spinsa.run(x, J, 1.0, 4, update="sync")
    np.testing.assert_array_equal(a.states, b.states)
    assert not np.allclose(a.final, c.final)
    expected = np.stack([ref_energies(s, J, 1.0).sum(1) for s in a.states])
    np.testing.assert_allclose(a.energies, expected, rtol=1e-10)


BAD_INPUTS = [
    (lambda x, J: (x[0], J, 1.0), "x must have shape"),
    (lambda x, J: (x, J[:, :, :2], 1.0), "J must have shape"),
    (lambda x, J: (x, J[:3, :3], 1.0), "expected J.shape"),
    (lambda x, J: (np.where(x > 0.5, np.nan, x), J, 1.0), "x contains"),
    (lambda x, J: (x, np.where(J > 0.5, np.inf, J), 1.0), "J contains"),
    (lambda x, J: (x, J, 0.0), "lam must be"),
    (lambda x, J: (x, J, -1.0), "lam must be"),
    (lambda x, J: (x, J, float("nan")), "lam must be"),
    (lambda x, J: (x.astype(complex), J, 1.0), "real float"),
]


@pytest.mark.parametrize("make, message", BAD_INPUTS)
@pytest.mark.parametrize(
    "func", [spinsa.local_fields, spinsa.site_energies, spinsa.attention, spinsa.step]
)
def test_bad_input_is_refused_with_a_named_argument(rng, make, message, func):
    x, J = random_system(rng, P=2, N=4, d=3)
    with pytest.raises(ValueError, match=message):
        func(*make(x, J))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(steps=2.5), "steps must be an integer"),
        (dict(steps=-1), "steps must be an integer >= 0"),
        (dict(steps=3, record_every=0), "record_every"),
        (dict(steps=3, norm="l2"), "norm must be one of"),
        (dict(steps=3, update="parallel"), "update must be one of"),
        (dict(steps=3, gamma=float("inf")), "gamma must be finite"),
    ],
)
def test_run_refuses_bad_parameters(rng, kwargs, message):
    x, J = random_system(rng, P=2, N=4, d=3)
    with pytest.raises(ValueError, match=message):
        spinsa.run(x, J, 1.0, **kwargs)


def test_score_clamp_matches_a_clamped_plain_formula(rng):
    x, J = random_system(rng, P=3, N=6, d=4, scale=4.0)
    s = np.minimum(np.einsum("pia,ijab,pjb->pij", x, J, x), 0.5) * 2.0
    s[:, np.arange(6), np.arange(6)] = -np.inf
    a = np.exp(s - s.max(axis=2, keepdims=True))
    a /= a.sum(axis=2, keepdims=True)
    expected = np.einsum("pij,ijab,pjb->pia", a, J, x)
    got = spinsa.local_fields(x, J, 2.0, score_clamp=0.5)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-13)
    assert not np.allclose(got, spinsa.local_fields(x, J, 2.0))


def test_bench_plain_sweep_is_the_async_sweep_and_the_bench_writes_json(tmp_path):
    """The bench's plain per-site loop computes what spinsa.async_sweep does; --json works."""
    import json

    from spinsa.bench import plain_numpy_sweep
    from spinsa.cli import main

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    J = spinsa.random_couplings(7, 3, scale=1.0, seed=2).astype(np.float64)
    order = np.random.default_rng(4).permutation(7)
    np.testing.assert_allclose(
        spinsa.async_sweep(x, J, 2.0, gamma=0.5, rng=4),
        plain_numpy_sweep(x, J, 2.0, order, gamma=0.5),
        atol=1e-10,
    )
    path = tmp_path / "bench.json"
    assert main(["bench", "--only", "async", "--quick", "--no-plain", "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert record["benchmarks"][0]["fast"]["name"] == "spinsa.async_sweep"
    assert record["matmul_peak_gflops"] > 0


def test_bench_device_paths_agree_with_numba():
    """The --device benchmarks' code, run on the CPU at a tiny size: torch's closed form
    matches numba's gradient, and both timings are there."""
    pytest.importorskip("torch")
    from spinsa.bench import bench_dynamics_device, bench_objective_device

    res = bench_objective_device(P=40, N=6, d=3, device="cpu", repeat=1)
    assert res["max_rel_diff"] < 1e-5
    assert res["fast"].seconds > 0 and res["plain"].seconds > 0
    assert bench_dynamics_device(P=8, N=6, d=3, steps=2, device="cpu", repeat=1)["fast"].gflops > 0


def test_bench_on_cuda_without_a_gpu_says_so(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from spinsa.cli import main

    assert main(["bench", "--device", "cuda", "--quick"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


@pytest.mark.gpu
def test_bench_on_cuda(tmp_path):
    import json

    from spinsa.cli import main

    path = tmp_path / "bench.json"
    assert main(["bench", "--device", "cuda", "--quick", "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert record["device"].startswith("cuda")
    assert all(b["max_rel_diff"] < 1e-4 for b in record["benchmarks"] if "max_rel_diff" in b)
