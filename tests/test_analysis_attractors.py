"""Fixed points, cycles, clustering and attractor basins."""

import numpy as np
import pytest

import spinsa
from spinsa.analysis import (
    AttractorReport,
    cluster_states,
    find_attractors,
    find_cycles,
    fixed_points,
    lagged_distances,
    overlap_lifetimes,
    random_spins,
    step_sizes,
    target_overlaps,
)


def unit(rng, *shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def plain_lagged(states, K):
    T = states.shape[0]
    out = np.full((K, T, states.shape[1]), np.nan)
    for k in range(1, K + 1):
        for t in range(k, T):
            out[k - 1, t] = np.linalg.norm(states[t] - states[t - k], axis=-1).max(axis=-1)
    return out


def test_lagged_distances_match_numpy(rng):
    states = unit(rng, 7, 4, 5, 3)
    np.testing.assert_allclose(lagged_distances(states, 3), plain_lagged(states, 3), rtol=1e-12)
    np.testing.assert_allclose(step_sizes(states), plain_lagged(states, 1)[0, 1:], rtol=1e-12)


def test_constructed_two_cycle_is_detected_as_period_two(rng):
    A, B, C = unit(rng, 3, 6, 4)
    # sample 0: A B A B ...; sample 1: C then stuck on A; sample 2: wanders
    T = 10
    states = np.empty((T, 3, 6, 4))
    states[:, 0] = np.where((np.arange(T) % 2 == 0)[:, None, None], A, B)
    states[:, 1] = A
    states[0, 1] = C
    states[:, 2] = unit(rng, T, 6, 4)
    rep = find_cycles(states, np.arange(T), max_period=3, tol=1e-8)
    np.testing.assert_array_equal(rep.period, [2, 1, 0])
    np.testing.assert_array_equal(rep.convergence_time, [0, 1, -1])
    np.testing.assert_array_equal(rep.is_fixed_point, [False, True, False])
    np.testing.assert_array_equal(rep.converged, [True, True, False])
    np.testing.assert_array_equal(fixed_points(states, tol=1e-8), [False, True, False])
    assert rep.final_step[0] == pytest.approx(np.linalg.norm(A - B, axis=-1).max())


def test_cycle_entered_late_gets_its_convergence_time(rng):
    A, B = unit(rng, 2, 5, 3)
    T = 12
    states = unit(rng, T, 1, 5, 3)
    for t in range(5, T):
        states[t, 0] = A if t % 2 else B
    rep = find_cycles(states, 100 + np.arange(T), max_period=2, tol=1e-8)
    assert rep.period[0] == 2 and rep.convergence_time[0] == 105


def test_find_cycles_needs_every_step(rng):
    states = unit(rng, 4, 2, 3, 2)
    with pytest.raises(ValueError, match="record_every=1"):
        find_cycles(states, np.array([0, 2, 4, 6]))


def test_cluster_states_groups_by_overlap(rng):
    A, B = unit(rng, 2, 30, 4)
    noise = lambda: 1e-3 * rng.standard_normal((30, 4))  # noqa: E731
    states = np.stack([B + noise(), A + noise(), A + noise(), B + noise(), B + noise(), -A])
    cl = cluster_states(states, q_min=0.99)
    np.testing.assert_array_equal(cl.labels, [0, 1, 1, 0, 0, 2])
    np.testing.assert_array_equal(cl.sizes, [3, 2, 1])
    np.testing.assert_array_equal(cl.representatives, [0, 1, 5])
    both = cluster_states(states, q_min=0.99, absolute=True)
    np.testing.assert_array_equal(both.sizes, [3, 3])
    part = cluster_states(states, include=np.array([True, True, False, False, True, True]))
    assert part.labels[2] == part.labels[3] == -1


def test_one_hebbian_pattern_is_a_fixed_point_with_full_lifetime(rng):
    xi = unit(rng, 1, 12, 4)
    J = spinsa.hebbian_couplings(xi)
    steps = 20
    traj = spinsa.run(xi, J, lam=1.0, steps=steps)
    rep = find_cycles(traj.states, traj.times, max_period=2)
    assert rep.period[0] == 1 and rep.is_fixed_point[0]
    assert rep.convergence_time[0] == 0
    life = overlap_lifetimes(target_overlaps(traj.states, xi), traj.times, threshold=0.9)
    assert life.lifetime[0] == steps and life.censored[0]
    report = find_attractors(J, 1.0, xi, steps, patterns=xi)
    assert report.n_attractors == 1 and report.attractor_period[0] == 1
    assert report.nearest_overlap[0] == pytest.approx(1.0, abs=1e-5)


def test_two_planted_attractors_have_the_right_basins(rng):
    # One Hebbian pattern: xi and -xi are both fixed points (the energy is even in x), and
    # a state with xi_j . x_j > 0 at every token flows to xi (each x_i moves towards xi_i
    # by c_i = sum_j alpha_ij xi_j . x_j > 0), so the basins of xi and -xi contain the
    # states with all token overlaps positive, or all negative. Start a fraction f of
    # random states in the first set, the others in the second.
    N, d, n, f = 16, 6, 200, 0.3
    xi = unit(rng, 1, N, d)
    J = spinsa.hebbian_couplings(xi)
    sign = np.where(rng.random(n) < f, 1.0, -1.0)
    x0 = random_spins(n, N, d, rng=rng, dtype=np.float64)
    x0 *= (sign[:, None] * np.sign(np.einsum("pia,ia->pi", x0, xi[0])))[..., None]
    patterns = np.concatenate([xi, -xi])
    report = find_attractors(J, 1.0, x0, 80, patterns=patterns, groups=np.where(sign > 0, "+", "-"))
    assert report.n_attractors == 2 and report.fraction_unconverged == 0
    np.testing.assert_array_equal(report.attractor_period, [1, 1])
    np.testing.assert_allclose(report.nearest_overlap, 1.0, atol=1e-6)
    # every trajectory ends at the pattern of its half-space: index 0 for +xi, 1 for -xi
    np.testing.assert_array_equal(report.nearest_index[report.labels], (sign < 0).astype(int))
    frac_plus = report.basin_fraction[list(report.nearest_index).index(0)]
    assert abs(frac_plus - f) < 5 * np.sqrt(f * (1 - f) / n)
    assert report.group_names == ("+", "-") or report.group_names == ("-", "+")
    np.testing.assert_allclose(report.group_fractions.max(axis=1), 1.0)
    np.testing.assert_allclose(report.basin_fraction.sum(), 1.0)


def test_global_attractor_of_two_hebbian_patterns_is_their_mean(rng):
    # With two Hebbian patterns the attention dynamics forgets which one it started near:
    # every trajectory, from near xi^1, near xi^2 or from random spins, ends on the
    # token-wise mean of the two patterns (projected on the sphere).
    N, d = 24, 8
    xi = unit(rng, 2, N, d)
    J = spinsa.hebbian_couplings(xi)
    near = xi[np.arange(20) % 2] + 0.3 * rng.standard_normal((20, N, d)) / np.sqrt(d)
    near /= np.linalg.norm(near, axis=-1, keepdims=True)
    x0 = np.concatenate([near, random_spins(10, N, d, rng=rng, dtype=np.float64)])
    groups = ["near"] * 20 + ["random"] * 10
    report = find_attractors(J, 1.0, x0, 250, patterns=xi, groups=groups, absolute=True)
    assert report.n_attractors == 1 and report.fraction_unconverged == 0
    np.testing.assert_allclose(report.basin_fraction, [1.0])
    assert abs(report.overlap_mean[0]) == pytest.approx(1.0, abs=1e-5)
    assert abs(report.nearest_overlap[0]) < 0.9
    # the attractor appears late: first the trajectory sits near its pattern (a transient)
    assert report.convergence_time.min() > 20


def test_phases_of_one_cycle_form_one_attractor():
    # two Ising tokens (d = 1) with J_12 = J_21 = -1 and gamma = 0: x_i(t+1) = -x_j(t),
    # so (+,+) <-> (-,-) is a 2-cycle, (+,-) and (-,+) are fixed points
    J = np.zeros((2, 2, 1, 1))
    J[0, 1] = J[1, 0] = -1.0
    s = [[1, 1], [-1, -1], [1, -1], [-1, 1], [1, 1]]
    x0 = np.array(s, dtype=np.float64)[..., None]
    report = find_attractors(J, 1.0, x0, 9, gamma=0.0, max_period=2)
    assert report.n_attractors == 3
    np.testing.assert_array_equal(report.attractor_period, [2, 1, 1])
    np.testing.assert_allclose(report.basin_fraction, [0.6, 0.2, 0.2])
    np.testing.assert_array_equal(report.labels, [0, 0, 1, 2, 0])
    np.testing.assert_array_equal(report.period, [2, 2, 1, 1, 2])


def test_random_spins_are_unit_and_seeded():
    x = random_spins(3, 5, 4, rng=1)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(x, random_spins(3, 5, 4, rng=1))


def test_report_round_trip(rng):
    J = np.zeros((2, 2, 1, 1))
    J[0, 1] = J[1, 0] = -1.0
    x0 = np.array([[1.0, 1.0], [1.0, -1.0]])[..., None]
    r = find_attractors(J, 1.0, x0, 5, gamma=0.0, groups=["a", "b"])
    back = AttractorReport.from_arrays(r.to_arrays(), r.attrs())
    np.testing.assert_array_equal(back.labels, r.labels)
    assert back.group_names == ("a", "b") and back.overlap_mean is None


def test_bad_arguments(rng):
    x = unit(rng, 3, 4, 2)
    J = np.zeros((4, 4, 2, 2))
    with pytest.raises(ValueError, match="steps"):
        find_attractors(J, 1.0, x, 2, max_period=3)
    with pytest.raises(ValueError, match="groups"):
        find_attractors(J, 1.0, x, 5, groups=[1, 2])
    with pytest.raises(ValueError, match="q_min"):
        cluster_states(x, q_min=1.5)


def test_attractors_are_decoded_and_compared_with_images(rng):
    from spinsa.embedding import PatchEmbedding

    emb = PatchEmbedding(image_shape=(4, 6), patch=2)
    images = rng.random((1, 4, 6))
    xi = emb.encode(images).astype(np.float64)
    J = spinsa.hebbian_couplings(xi)
    report = find_attractors(J, 1.0, xi, 5, patterns=xi, embedding=emb)
    assert report.n_attractors == 1
    assert report.corr_nearest[0] == pytest.approx(1.0, abs=1e-6)
    assert report.corr_mean[0] == pytest.approx(1.0, abs=1e-6)
    other = rng.random((3, 4, 6))
    with_images = find_attractors(J, 1.0, xi, 5, patterns=xi, embedding=emb, images=images)
    assert with_images.corr_mean[0] == pytest.approx(1.0, abs=1e-6)
    mean_of_others = find_attractors(
        J, 1.0, xi, 5, patterns=emb.encode(other), embedding=emb, images=other
    )
    expected = np.corrcoef(emb.decode(xi)[0].ravel(), other.mean(0).ravel())[0, 1]
    assert mean_of_others.corr_mean[0] == pytest.approx(expected, abs=1e-5)


def check_against_the_recorded_run(J, x0, report, **dynamics):
    """Every trajectory of an until_converged report is the plain run of its steps_run
    steps, classified by find_cycles on the full record. One trajectory alone rounds a
    little differently from the batch (a few epsilons), which may move the step at which a
    distance falls below tol by one: the record one step longer may decide."""
    eps = float(np.finfo(x0.dtype).eps)
    for p in range(x0.shape[0]):
        n = int(report.steps_run[p])
        traj = spinsa.run(x0[p : p + 1], J, 1.0, n + 1, record_every=1, **dynamics)
        cycles = find_cycles(
            traj.states[: n + 1], traj.times[: n + 1], report.max_period, report.tol
        )
        if cycles.period[0] == 0 and report.period[p] > 0:
            cycles = find_cycles(traj.states, traj.times, report.max_period, report.tol)
        assert cycles.period[0] == report.period[p]
        assert abs(cycles.convergence_time[0] - report.convergence_time[p]) <= 1
        step = np.linalg.norm(traj.states[n, 0] - traj.states[n - 1, 0], axis=-1).max()
        assert step == pytest.approx(report.final_step[p], abs=10 * eps)
        if report.labels[p] >= 0:  # the final state belongs to its attractor
            q = target_overlaps(traj.states[n], report.states[report.labels[p]][None])
            assert abs(q[0]) >= report.q_min


def test_until_converged_stops_each_trajectory_on_its_cycle():
    # the Ising pair of test_phases_of_one_cycle_form_one_attractor: the 2-cycle is seen
    # at t = 3 (two lag-2 distances within tol), the fixed points at t = 1
    J = np.zeros((2, 2, 1, 1))
    J[0, 1] = J[1, 0] = -1.0
    x0 = np.array([[1, 1], [-1, -1], [1, -1], [-1, 1], [1, 1]], dtype=np.float64)[..., None]
    report = find_attractors(J, 1.0, x0, until_converged=True, gamma=0.0, max_period=2)
    np.testing.assert_array_equal(report.period, [2, 2, 1, 1, 2])
    np.testing.assert_array_equal(report.steps_run, [3, 3, 1, 1, 3])
    np.testing.assert_allclose(report.basin_fraction, [0.6, 0.2, 0.2])
    assert report.until_converged and report.tol == pytest.approx(100 * np.finfo(float).eps)
    check_against_the_recorded_run(J, x0, report, gamma=0.0)


def test_until_converged_follows_slow_transients(rng):
    # two Hebbian patterns: the trajectories sit near their pattern for a while (the
    # transient of test_global_attractor_of_two_hebbian_patterns_is_their_mean) and leave
    # at different times; each one stops on its own
    N, d = 12, 4
    xi = unit(rng, 2, N, d)
    J = spinsa.hebbian_couplings(xi)
    x0 = np.concatenate([xi + 0.2 * unit(rng, 2, N, d), random_spins(4, N, d, rng=rng)])
    x0 = (x0 / np.linalg.norm(x0, axis=-1, keepdims=True)).astype(np.float32)
    report = find_attractors(J, 1.0, x0, until_converged=True, patterns=xi, absolute=True)
    assert report.fraction_unconverged == 0
    assert np.all(report.final_step < report.tol)
    assert report.tol == pytest.approx(100 * np.finfo(np.float32).eps)
    assert len(set(report.steps_run.tolist())) > 1  # stopped one by one
    check_against_the_recorded_run(J, x0, report)
    short = find_attractors(J, 1.0, x0, until_converged=True, max_steps=3)
    assert short.fraction_unconverged == 1 and np.all(short.steps_run == 3)


@pytest.mark.slow
def test_until_converged_where_the_fixed_step_default_fails():
    # a small pseudo-likelihood fit of synthetic digits: its trajectories still move by
    # ~1e-3 per step at t = 200, so the fixed-step default finds nothing, while running
    # until converged (default tolerance) finds every trajectory's fixed point
    from spinsa.datasets.synthetic import synthetic_digits
    from spinsa.embedding import PatchEmbedding

    emb = PatchEmbedding(image_shape=(8, 8), patch=2)
    xi = emb.encode(synthetic_digits(60, size=8, seed=0)[0])
    config = spinsa.FitConfig(backend="lbfgs", lam=5.0, max_iter=20)
    J = spinsa.fit_pseudolikelihood(xi, config=config).J
    x0 = random_spins(24, emb.n_tokens, emb.d, rng=1)
    fixed = find_attractors(J, 1.0, x0, 200)
    assert fixed.fraction_unconverged > 0.5
    report = find_attractors(J, 1.0, x0, until_converged=True, patterns=xi)
    assert report.fraction_unconverged == 0 and report.n_attractors >= 1
    assert np.all(report.period == 1) and report.steps_run.max() > 200
    check_against_the_recorded_run(J, x0[:3], report)


def test_until_converged_arguments(rng):
    x = unit(rng, 3, 4, 2)
    J = np.zeros((4, 4, 2, 2))
    with pytest.raises(ValueError, match="not both"):
        find_attractors(J, 1.0, x, 10, until_converged=True)
    with pytest.raises(ValueError, match="max_steps applies"):
        find_attractors(J, 1.0, x, 10, max_steps=20)
    with pytest.raises(ValueError, match="steps is missing"):
        find_attractors(J, 1.0, x)
    with pytest.raises(ValueError, match="max_steps"):
        find_attractors(J, 1.0, x, until_converged=True, max_steps=0)
