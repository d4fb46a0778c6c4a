"""Transient lifetimes on hand-made curves whose answers are known."""

import numpy as np
import pytest

from spinsa.analysis import (
    Lifetimes,
    error_lifetimes,
    overlap_lifetimes,
    pattern_threshold,
    summarize_lifetimes,
)


def reference_lifetime(q, times, cond, k):
    """Loop version: the stretch of cond around record k."""
    T = len(q)
    if not cond[k]:
        return 0, times[k], times[k], False
    k0 = k
    while k0 > 0 and cond[k0 - 1]:
        k0 -= 1
    k1 = k
    while k1 < T - 1 and cond[k1 + 1]:
        k1 += 1
    censored = k1 == T - 1
    leave = times[-1] if censored else times[k1 + 1]
    return leave - times[k0], times[k0], leave, censored


def test_a_transient_rises_and_falls():
    times = np.arange(8)
    m = np.array([0.3, 0.6, 0.95, 0.99, 0.92, 0.7, 0.4, 0.3])[:, None]
    r = overlap_lifetimes(m, times, threshold=0.9)
    assert r.t_peak[0] == 3 and r.peak[0] == 0.99
    assert (r.t_enter[0], r.t_leave[0], r.lifetime[0]) == (2, 5, 3)
    assert not r.censored[0]
    assert r.time_above[0] == 3


def test_a_fixed_point_lives_for_the_whole_run():
    times = np.arange(0, 51)
    m = np.ones((51, 2))
    r = overlap_lifetimes(m, times, 0.9)
    np.testing.assert_array_equal(r.lifetime, 50)
    assert r.censored.all() and r.duration == 50
    np.testing.assert_array_equal(r.t_peak, 0)


def test_never_above_threshold():
    m = np.full((5, 1), 0.5)
    r = overlap_lifetimes(m, np.arange(5), 0.9)
    assert r.lifetime[0] == 0 and not r.censored[0] and r.time_above[0] == 0


def test_random_curves_match_the_loop(rng):
    T, P = 30, 40
    times = np.cumsum(rng.integers(1, 4, T)) - 1
    m = rng.random((T, P))
    r = overlap_lifetimes(m, times, 0.6)
    for p in range(P):
        k = int(np.argmax(m[:, p]))
        life, enter, leave, cens = reference_lifetime(m[:, p], times, m[:, p] > 0.6, k)
        assert (r.lifetime[p], r.t_enter[p], r.t_leave[p], r.censored[p]) == (
            life,
            enter,
            leave,
            cens,
        )
        widths = np.append(np.diff(times), 0)
        assert r.time_above[p] == (widths * (m[:, p] > 0.6)).sum()


def test_error_lifetimes_use_the_input_error_as_baseline():
    times = np.arange(6)
    err = np.array([[0.5, 0.3], [0.2, 0.6], [0.1, 0.7], [0.4, 0.8], [0.6, 0.9], [0.7, 1.0]])
    r = error_lifetimes(err, times)
    assert r.criterion == "error"
    np.testing.assert_array_equal(r.threshold, [0.5, 0.3])
    # sample 0: below 0.5 at t = 1, 2, 3, back above at t = 4
    assert (r.t_peak[0], r.t_enter[0], r.t_leave[0], r.lifetime[0]) == (2, 1, 4, 3)
    # sample 1: never better than its input
    assert r.lifetime[1] == 0 and r.t_peak[1] == 0
    r2 = error_lifetimes(err, times, baseline=0.65)
    assert r2.lifetime[0] == 5 and r2.lifetime[1] == 2


def test_summary_with_error_bars(rng):
    results, levels = [], [0.1, 0.3]
    for level in levels:
        m = rng.random((20, 50)) + (0.5 if level < 0.2 else 0.0)
        results.append(overlap_lifetimes(m, np.arange(20), 0.9))
    table = summarize_lifetimes(results, levels)
    assert table.counts.shape == (2, 20) and table.counts.sum(axis=1).tolist() == [50, 50]
    for k, r in enumerate(results):
        assert table.lifetime_mean[k] == pytest.approx(r.lifetime.mean())
        assert table.lifetime_sem[k] == pytest.approx(r.lifetime.std(ddof=1) / np.sqrt(50))
        assert table.fraction_censored[k] == pytest.approx(r.censored.mean())
    assert table.lifetime_mean[0] > table.lifetime_mean[1]


def test_round_trip_through_arrays():
    r = overlap_lifetimes(np.ones((4, 3)), np.arange(4), 0.5)
    back = Lifetimes.from_arrays(r.to_arrays(), r.attrs())
    for k, v in r.to_arrays().items():
        np.testing.assert_array_equal(getattr(back, k), v)
    assert back.criterion == r.criterion and back.duration == r.duration


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        overlap_lifetimes(np.ones(5), np.arange(5))
    with pytest.raises(ValueError, match="times"):
        overlap_lifetimes(np.ones((5, 2)), np.arange(4))
    with pytest.raises(ValueError, match="increasing"):
        overlap_lifetimes(np.ones((3, 2)), np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="baseline"):
        error_lifetimes(np.ones((3, 2)), np.arange(3), baseline=np.ones(3))
    with pytest.raises(ValueError, match="levels"):
        summarize_lifetimes([overlap_lifetimes(np.ones((3, 2)), np.arange(3), 0.5)], [1, 2])
    with pytest.raises(ValueError, match="threshold is required"):
        overlap_lifetimes(np.ones((3, 2)), np.arange(3))
    with pytest.raises(ValueError, match="not both"):
        overlap_lifetimes(np.ones((3, 2)), np.arange(3), 0.5, patterns=np.ones((2, 3, 2)))
    with pytest.raises(ValueError, match="at least 2 patterns"):
        pattern_threshold(np.ones((1, 3, 2)))


def test_pattern_threshold_is_midway_between_self_and_mutual_overlaps(rng):
    # patterns as alike as MNIST digits (mutual overlap ~0.85): a state sitting exactly at
    # another pattern must not count as at its target, which a fixed 0.9 barely ensures
    P, N, d = 12, 30, 4
    common = rng.standard_normal((N, d))
    xi = common + 0.45 * rng.standard_normal((P, N, d))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    q = np.einsum("and,bnd->ab", xi, xi) / N  # plain P x P overlaps
    mutual = q[~np.eye(P, dtype=bool)]
    assert 0.7 < mutual.mean() < 0.95
    threshold = pattern_threshold(xi)
    np.testing.assert_allclose(threshold, 0.5 * (np.diag(q).mean() + mutual.mean()), rtol=1e-12)
    # a trajectory that leaves its target (pattern 0) for pattern 1 at t = 3
    m = np.r_[np.ones(3), np.full(5, q[0, 1])][:, None]
    r = overlap_lifetimes(m, np.arange(8), patterns=xi)
    assert r.threshold[0] == threshold and r.lifetime[0] == 3 and not r.censored[0]


def test_lifetimes_vs_corruption_follows_the_dynamics(rng):
    # two Hebbian patterns: a state near one of them lingers there (a transient) before
    # falling onto their common mean, the global attractor
    import spinsa
    from spinsa.analysis import lifetimes_vs_corruption, target_overlaps

    N, d, P, steps = 24, 8, 6, 50
    xi = rng.standard_normal((2, N, d))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    J = spinsa.hebbian_couplings(xi)
    targets = xi[np.arange(P) % 2]

    def corrupt(x, level, gen):
        y = x + level * gen.standard_normal(x.shape) / np.sqrt(d)
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    table, per_level = lifetimes_vs_corruption(
        J, 1.0, targets, corrupt, [0.1, 0.6], steps, threshold=0.9, rng=3
    )
    assert table.levels.tolist() == [0.1, 0.6]
    for r in per_level:
        assert not r.censored.any() and (r.lifetime > 0).all()
    assert table.lifetime_mean[0] > table.lifetime_mean[1]
    # the on-the-fly overlaps agree with the recorded trajectory
    x0 = corrupt(targets, 0.1, np.random.default_rng(3))
    traj = spinsa.run(x0, J, 1.0, steps)
    direct = overlap_lifetimes(target_overlaps(traj.states, targets), traj.times, 0.9)
    np.testing.assert_array_equal(direct.lifetime, per_level[0].lifetime)
    np.testing.assert_allclose(direct.peak, per_level[0].peak, rtol=1e-6)


def test_the_two_lifetimes_against_a_reference():
    """significant_gain_lifetime: z of the mean curve against the reference above 3;
    below_reference_lifetimes: each image's error below the reference's on that image."""
    from spinsa.analysis.summary import (
        below_reference_lifetimes,
        combined_z,
        significant,
        significant_gain_lifetime,
    )

    assert combined_z(1.0, 0.3, 0.5, 0.4) == pytest.approx(1.0)
    assert np.isnan(combined_z(1.0, 0.0, 0.5, 0.0)) and np.isnan(combined_z(1.0, np.inf, 0, 1))
    np.testing.assert_allclose(combined_z([1.0, 2.0], 0.3, 0.5, 0.4), [1.0, 3.0])
    assert significant(3.5) and not significant(3.0) and not significant(np.nan)
    times = np.arange(6)
    error = np.array([0.0, 0.5, 0.2, 0.3, 0.9, 0.9])  # t = 0 does not count (first = 1)
    sem = np.full(6, 0.05)
    life = significant_gain_lifetime(error, sem, 1.0, 0.0, times, first=1)
    # z = (1 - e) / 0.05: 10, 16, 14, 2, 2 from t = 1: above 3 over t = 1..3, left at t = 4
    assert (life.t_enter[0], life.t_leave[0], life.lifetime[0]) == (1, 4, 3)
    errors = np.array([[0.9, 0.9], [0.1, 0.8], [0.2, 0.1], [0.9, 0.1]])  # (T, P)
    per_image = below_reference_lifetimes(errors, np.arange(4), np.array([0.5, 0.5]), first=1)
    np.testing.assert_array_equal(per_image.lifetime, [2, 1])  # the second: a lower bound
    np.testing.assert_array_equal(per_image.censored, [False, True])


def _rotating(theta, N=5):
    """Unit spins (T, 1, N, 2) at angle theta(t) from the pattern (1, 0), on every token."""
    theta = np.asarray(theta, dtype=np.float64)
    spins = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    return np.broadcast_to(spins[:, None, None, :], (theta.size, 1, N, 2)).copy()


def test_lifetimes_do_not_count_the_attractor():
    # issue 43, item 17: the attractor's own overlap with the target (0.955, at 0.3 rad from
    # it) is above the threshold (0.9), so a trajectory that ends on the attractor used to
    # be "at its target" for the whole run, censored. It leaves for the attractor at t = 7,
    # and approaches it from the target's side (0.29, 0.299 rad...) without reaching it.
    from spinsa.analysis import target_overlaps

    theta = [0.5, 0.1, 0.0, 0.0, 0.0, 0.0, 0.1, 0.25, 0.29, 0.299, 0.2999, *[0.3] * 10]
    times = np.arange(len(theta))
    states, pattern = _rotating(theta), _rotating([0.0])[0]
    attractor = _rotating([0.3])[0]
    m = target_overlaps(states, pattern).astype(np.float64)
    a = target_overlaps(attractor, pattern)  # cos 0.3, what a user computes
    np.testing.assert_allclose(a, np.cos(0.3), rtol=1e-6)
    # without the attractor: the bug, the attractor's persistence
    blind = overlap_lifetimes(m, times, 0.9)
    assert blind.censored[0] and blind.lifetime[0] == 19  # from t = 1 to the end
    # with it: above the threshold and nearer the target than midway to the attractor,
    # (1 + cos 0.3) / 2 = 0.978: cos 0.1 passes, cos 0.25 = 0.969 does not
    life = overlap_lifetimes(m, times, 0.9, attractor=a)
    assert (life.t_enter[0], life.t_leave[0], life.lifetime[0]) == (1, 7, 6)
    assert not life.censored[0] and life.t_peak[0] == 2 and life.time_above[0] == 6
    np.testing.assert_allclose(life.level, 0.5 * (1 + np.cos(0.3)), rtol=1e-6)
    assert life.threshold[0] == 0.9 and life.attractor_passes.tolist() == [True]
    # the error: the mean squared distance to the target, 2 (1 - cos theta); the attractor's
    # (0.089) is below the corrupted input's (0.245), so the same holds for the error
    errors = 2 * (1 - np.cos(np.asarray(theta)))[:, None]
    assert error_lifetimes(errors, times).censored[0]
    err = error_lifetimes(errors, times, attractor=2 * (1 - np.cos(0.3)))
    assert (err.t_enter[0], err.t_leave[0], err.lifetime[0]) == (1, 7, 6)
    assert err.attractor_passes.tolist() == [True]
    # an attractor below the threshold changes nothing where midway is below it too
    far = overlap_lifetimes(m, times, 0.99, attractor=0.5)
    np.testing.assert_array_equal(far.lifetime, overlap_lifetimes(m, times, 0.99).lifetime)
    assert far.attractor_passes.tolist() == [False]
    # the table and the figures say where the attractor passes the threshold
    table = summarize_lifetimes([life, far], [0.1, 0.2])
    np.testing.assert_array_equal(table.fraction_attractor_passes, [1.0, 0.0])
    assert summarize_lifetimes([blind], [0.1]).fraction_attractor_passes is None
    assert "the attractor passes the threshold for 100%" in life.plot().get_title()
    labels = table.plot().get_legend_handles_labels()[1]
    assert "the attractor passes the threshold for 100%" in labels[0]
    assert "attractor" not in labels[1]
    back = Lifetimes.from_arrays(life.to_arrays(), life.attrs())
    np.testing.assert_array_equal(back.attractor, life.attractor)
    with pytest.raises(ValueError, match=r"attractor must be a number or have shape \(1,\)"):
        overlap_lifetimes(m, times, 0.9, attractor=[0.9, 0.9])
    with pytest.raises(ValueError, match="attractor"):
        error_lifetimes(errors, times, attractor=np.nan)


def test_lifetimes_vs_corruption_measured_against_the_attractor(rng):
    # two Hebbian patterns: a state near one of them lingers there, then falls onto their
    # common mean, the global attractor. Below its overlap with the patterns, a threshold
    # counts the time spent at the attractor, unless the attractor is given.
    import spinsa
    from spinsa.analysis import find_attractors, lifetimes_vs_corruption

    N, d, P, steps = 24, 8, 6, 100
    xi = rng.standard_normal((2, N, d))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    J = spinsa.hebbian_couplings(xi)
    targets = xi[np.arange(P) % 2]
    report = find_attractors(J, 1.0, targets, until_converged=True)  # where they all end
    assert report.n_attractors == 1 and report.fraction_unconverged == 0
    x_a = report.states[0]
    a = np.einsum("nd,pnd->p", x_a, targets) / N
    threshold = 0.5 * a.min()  # the attractor passes it for every target

    def corrupt(x, level, gen):
        y = x + level * gen.standard_normal(x.shape) / np.sqrt(d)
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    args = (J, 1.0, targets, corrupt, [0.1], steps)
    _, [blind] = lifetimes_vs_corruption(*args, threshold=threshold, rng=3)
    assert blind.censored.all()  # what the attractor's persistence looked like
    _, [life] = lifetimes_vs_corruption(*args, threshold=threshold, attractor=x_a, rng=3)
    np.testing.assert_allclose(life.attractor, a, rtol=1e-5)
    assert life.attractor_passes.all() and not life.censored.any()
    assert (life.lifetime > 0).all() and (life.lifetime < blind.lifetime).all()
    with pytest.raises(ValueError, match=r"attractor must be one state"):
        lifetimes_vs_corruption(*args, threshold=threshold, attractor=xi)
