"""Issue 43's reproductions on the fits, the planted studies, the attractor search and the
Hebbian comparison. Each was a raw error, a run without end, or a NaN, an inf or a divergent
fit returned without a word; each now gives an error that says what to change, or a result
that says what happened."""

import re
import subprocess
import sys

import numpy as np
import pytest

import spinsa
from spinsa.analysis import (
    compare_with_hebbian,
    coupling_cosine,
    find_attractors,
    fit_planted,
    loglog_slope,
    pair_cosines,
    pairwise_cosines,
    planted_couplings,
    recovery_curve,
    sample_planted,
)
from spinsa.fit import FitConfig


def unit(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


XI = unit((16, 5, 3))


# --------------------------------------------------------------- item 1: an absurd lr
@pytest.mark.parametrize("loss", ["pl", "normalised"])
def test_an_lr_beyond_float32_is_refused_before_the_fit(loss):
    """lr = 1e38 made torch raise 'value cannot be converted to type float without
    overflow' (Adam's first step is lr / 0.1): refused, naming lr, before torch loads."""
    with pytest.raises(ValueError, match=r"lr = 1e\+38 is too large: it must be at most 1e\+30"):
        spinsa.fit_pseudolikelihood(
            XI, backend="torch", lr=1e38, loss=loss, constraint="l2", epochs=2, batch_size=8
        )


@pytest.mark.parametrize(
    "options, phrase",
    [
        (dict(lr=1e31), "lr = 1e+31 is too large"),
        (dict(optimizer="sgd", momentum=1e300), "momentum = 1e+300 is too large"),
        (dict(weight_decay=1e31), "weight_decay = 1e+31 is too large"),
        (dict(optimizer="adamw", lr=1e20, weight_decay=1e20), "lr * weight_decay = 1e+40"),
        (dict(constraint="l2", l2=1e308), "l2 = 1e+308 is too large"),
    ],
)
def test_optimiser_values_beyond_the_bound_name_the_option(options, phrase):
    with pytest.raises(ValueError, match=re.escape(phrase)):
        FitConfig(backend="torch", **options)


def test_the_bound_itself_is_accepted():
    """1e30 stays a fit option (test_bad_input: such an lr gives a non-finite-result error)."""
    assert FitConfig(backend="torch", lr=1e30).lr == 1e30
    assert FitConfig(constraint="l2", l2=1e30).l2 == 1e30


def test_the_command_line_refuses_lr_1e38_in_one_line_and_exits(tmp_path):
    """The reproduction: a torch traceback, and a process still alive after 120 s."""
    argv = ["train", "--no-progress", "--no-checkpoint", "--random-patterns", "16", "5", "3",
            "--backend", "torch", "--epochs", "2", "--batch-size", "8", "--lr", "1e38",
            "-o", str(tmp_path / "x.h5")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "spinsa.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "lr = 1e+38 is too large" in done.stderr
    assert not (tmp_path / "x.h5").exists()


# ------------------------------------------------------- item 8: an l2 whose gradient is inf
def test_an_l2_whose_penalty_gradient_overflows_is_refused():
    """l2 = 1e308 returned epoch_grad_norm = inf."""
    with pytest.raises(ValueError, match=r"l2 = 1e\+308 is too large"):
        spinsa.fit_pseudolikelihood(XI, loss="normalised", constraint="l2", l2=1e308)


def test_the_largest_l2_gives_a_finite_history():
    res = spinsa.fit_pseudolikelihood(XI, loss="normalised", constraint="l2", l2=1e30, max_iter=5)
    assert np.isfinite(res.epoch_grad_norm).all() and np.isfinite(res.epoch_loss).all()
    assert np.isfinite(res.J).all()


# ------------------------------------------------- item 14: a divergent fit called converged
DEGENERATE = {"one pattern": XI[:1], "identical patterns": np.repeat(XI[:1], 4, axis=0)}


@pytest.mark.parametrize("data", list(DEGENERATE))
@pytest.mark.parametrize("backend", ["lbfgs", "torch"])
def test_a_divergent_normalised_fit_is_never_called_converged(data, backend):
    """On one pattern, or identical ones, the normalised loss has no finite minimum; the
    unconstrained fit reached |J| ~ 1e9 and was reported converged."""
    options = dict(loss="normalised", constraint="none", lam=5.0)
    if backend == "torch":
        pytest.importorskip("torch")
        options |= dict(backend="torch", device="cpu", lr=2.0, epochs=100, batch_size=1)
    with pytest.warns(RuntimeWarning, match="diverged"):
        res = spinsa.fit_pseudolikelihood(DEGENERATE[data], **options)
    assert res.converged is False
    assert res.message.startswith("diverged") and "no finite minimum" in res.message
    limit = 100 * np.sqrt(5 * 4) / 5.0
    assert np.linalg.norm(res.J) > limit and np.isfinite(res.J).all()
    assert "not converged" in res.convergence_line()


def test_a_normalised_fit_of_varied_patterns_still_converges():
    res = spinsa.fit_pseudolikelihood(
        unit((200, 4, 2), seed=3), loss="normalised", constraint="none", lam=1.0,
        dtype="float64", max_iter=300,
    )  # fmt: skip
    assert res.converged and not res.message.startswith("diverged")


def test_the_command_line_reports_the_divergence(tmp_path, capsys):
    from spinsa.cli import main

    argv = ["train", "--random-patterns", "1", "5", "3", "--set", "fit.loss=normalised",
            "--set", "fit.constraint=none", "--no-progress", "--no-checkpoint",
            "-o", str(tmp_path / "x.h5")]  # fmt: skip
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "not converged after" in out and "diverged: |J|" in out and "; converged" not in out
    assert "warning: diverged" in err and "Traceback" not in err


# ------------------------------------------------------------ items 5, 9, 12: planted studies
J4 = planted_couplings("random", 4, 2, scale=1.0, seed=0)


@pytest.mark.parametrize(
    "sizes, phrase",
    [
        ([], "at least two distinct sample sizes M, got []"),
        ([10], "at least two distinct sample sizes M, got [10]"),
        ([10, 10], "n_samples repeats [10]"),
        ([5, 0], "n_samples[...] must be an integer >= 1, got 0"),
        (10, "n_samples must be a list of sample sizes"),
    ],
)
def test_a_recovery_curve_needs_two_distinct_sample_sizes(sizes, phrase):
    """[] raised IndexError; [10] returned slope NaN; [10, 10] a slope through one point."""
    with pytest.raises(ValueError, match=re.escape(phrase)):
        recovery_curve(J4, 1.0, sizes)


def test_a_recovery_curve_of_zero_couplings_is_refused():
    """It raised ZeroDivisionError."""
    with pytest.raises(ValueError, match="J_star is all zeros"):
        recovery_curve(np.zeros((4, 4, 2, 2)), 1.0, [5, 10])


def test_loglog_slope_needs_two_sizes_and_positive_errors():
    with pytest.raises(ValueError, match="two distinct"):
        loglog_slope([10, 10], [0.5, 0.4])
    with pytest.raises(ValueError, match="finite and > 0"):
        loglog_slope([10, 20], [0.5, 0.0])
    with pytest.raises(ValueError, match="one length"):
        loglog_slope([10, 20, 40], [0.5, 0.4])


def test_fit_planted_checks_l2_as_the_fit_does():
    """l2 = -1 was accepted (|J| ~ 2.8e149); l2 = NaN blamed 'J contains 48 NaN'."""
    x, x_site = sample_planted(J4, 1.0, 20, burn_in=2, rng=0)
    with pytest.raises(ValueError, match="l2 must be a finite number >= 0, got -1.0"):
        fit_planted(x, 1.0, x_site=x_site, l2=-1.0)
    with pytest.raises(ValueError, match="l2 must be finite, got nan"):
        fit_planted(x, 1.0, x_site=x_site, l2=float("nan"))
    with pytest.raises(ValueError, match=r"l2 = 1e\+308 is too large"):
        fit_planted(x, 1.0, x_site=x_site, l2=1e308)
    with pytest.raises(ValueError, match="max_iter"):
        fit_planted(x, 1.0, max_iter=0)
    with pytest.raises(ValueError, match="x_site has shape"):
        fit_planted(x, 1.0, x_site=x_site[:5])


def test_fit_planted_warns_when_the_normalised_loss_diverges():
    x = np.repeat(unit((1, 4, 2)), 3, axis=0)
    with pytest.warns(RuntimeWarning, match="diverged on these M = 3 samples"):
        fit_planted(x, 1.0)


# ------------------------------------------------------------- item 6: an attractor search
ROTATION = np.zeros((2, 2, 2, 2))
ROTATION[0, 1] = ROTATION[1, 0] = [[0.0, -1.0], [1.0, 0.0]]  # a 90° turn: a 4-cycle at γ = 0
STARTS = unit((3, 2, 2), seed=1)


def test_a_rotation_ends_unconverged_at_the_default_max_steps():
    """The reproduction did not finish in 300 s: it ends, every start unconverged (a cycle
    longer than max_period), and with max_period = 4 the 4-cycle is found."""
    report = find_attractors(ROTATION, 1.0, STARTS, until_converged=True, gamma=0.0)
    assert report.fraction_unconverged == 1.0 and report.n_attractors == 0
    assert np.all(report.labels == -1) and np.all(report.period == 0)
    assert np.all(report.steps_run == 10_000)
    four = find_attractors(ROTATION, 1.0, STARTS, until_converged=True, gamma=0.0, max_period=4)
    assert np.all(four.period == 4) and four.fraction_unconverged == 0.0


@pytest.mark.parametrize("until_converged", [True, False])
def test_an_attractor_search_of_no_end_is_refused_before_it_starts(until_converged):
    """max_steps = 10**12 ran without end."""
    if until_converged:
        call = dict(until_converged=True, max_steps=10**12)
        phrase = "max_steps = 1000000000000 would run the dynamics of 3 trajectories"
    else:
        call, phrase = dict(steps=10**12), "steps = 1000000000000 would run"
    with pytest.raises(ValueError, match=re.escape(phrase)) as info:
        find_attractors(ROTATION, 1.0, STARTS, gamma=0.0, **call)
    assert "more than the limit of a day" in str(info.value)


# ---------------------------------------------------------- item 10: cosines at any scale
def test_cosines_of_couplings_at_any_finite_scale():
    """pairwise_cosines of float32 J scaled by 1e30 returned NaN."""
    J = spinsa.random_couplings(5, 3, seed=0).astype(np.float32)
    K = spinsa.random_couplings(5, 3, seed=1).astype(np.float32)
    ref, ref_global = pair_cosines(J, K), coupling_cosine(J, K)
    for scale, dtype in ((1e30, np.float32), (1e200, np.float64), (1e-30, np.float32)):
        big = (J.astype(np.float64) * scale).astype(dtype)
        np.testing.assert_allclose(pair_cosines(big, K), ref, rtol=1e-5, atol=1e-6)
        assert coupling_cosine(big, K) == pytest.approx(ref_global, rel=1e-5)
        both = pairwise_cosines([big, K])
        assert np.isfinite(both.cosine).all() and np.isfinite(both.mean).all()
        assert both.cosine[0, 1] == pytest.approx(ref_global, rel=1e-5)


@pytest.mark.parametrize("P, N", [(1, 5), (4, 2), (1, 2)])
def test_the_hebbian_comparison_of_one_pattern_or_two_tokens_is_finite(P, N):
    """pair_cosine came out NaN at P = 1 or N = 2; NaN stays on the diagonal only."""
    xi = unit((P, N, 3), seed=2)
    J = spinsa.random_couplings(N, 3, seed=3)
    cmp = compare_with_hebbian(J, xi)
    off = ~np.eye(N, dtype=bool)
    assert np.isfinite(cmp.pair_cosine[off]).all() and np.isnan(np.diag(cmp.pair_cosine)).all()
    assert np.isfinite([cmp.global_cosine, cmp.mean_pair_cosine, cmp.median_pair_cosine]).all()
