"""Tests of the one early-stopping rule (spinsa._convergence) on synthetic loss curves."""

import math

import numpy as np
import pytest

from spinsa._convergence import (
    Convergence,
    criterion_text,
    not_converged_text,
    stopping_epoch,
)


def plain_stopping_epoch(curve, rel_tol, patience):
    """The rule as a plain loop: the first e >= patience at which the best loss so far
    improved by less than rel_tol (relative) on the best of patience epochs before."""
    best = []
    for v in curve:
        v = math.inf if math.isnan(v) else v
        best.append(min(best[-1], v) if best else v)
    for e in range(patience, len(curve)):
        old, new = best[e - patience], best[e]
        if new == old or old - new < rel_tol * abs(old):
            return e
    return None


def test_known_stopping_epoch_of_a_smooth_curve():
    # v_e = 1 + 2^-e: over 5 epochs the best falls by 31 2^-e / (1 + 32 2^-e), which is
    # 0.75 % at e = 12 and 0.38 % at e = 13: the rule (< 0.5 %) first holds at e = 13
    curve = 1 + 2.0 ** -np.arange(30)
    assert stopping_epoch(curve) == 13
    assert stopping_epoch(curve, rel_tol=0.005, patience=5) == 13
    assert stopping_epoch(curve[:13]) is None  # not yet
    assert stopping_epoch(curve[:14]) == 13
    # a looser rule stops sooner, a longer patience later
    assert stopping_epoch(curve, rel_tol=0.02) < 13 < stopping_epoch(curve, patience=8)


def test_edge_cases():
    assert stopping_epoch([1.0] * 5) is None  # shorter than patience + 1: never
    assert stopping_epoch([]) is None
    assert stopping_epoch([1.0] * 6) == 5  # flat: after patience epochs
    assert stopping_epoch(np.arange(1.0, 20.0)) == 5  # never improving
    assert stopping_epoch([0.0] * 8) == 5  # a zero loss that stays zero
    assert stopping_epoch([math.nan] * 8) == 5  # no finite loss: no improvement
    assert stopping_epoch([3.0, *[math.nan] * 6]) == 5
    # noisy: the best is set at epoch 2, everything after is noise above it
    assert stopping_epoch([1, 0.8, 0.5, 0.6, 0.9, 0.55, 0.7, 0.51, 0.8]) == 7
    # still improving by 1 % a epoch: never stops
    assert stopping_epoch(0.99 ** np.arange(200)) is None
    # rel_tol = 0: "patience epochs without a lower loss"
    assert stopping_epoch([5, 4, 3, 3.5, 2.999, 3, 3], rel_tol=0, patience=3) is None
    assert stopping_epoch([5, 4, 3, 3.5, 2.999, 3, 3, 3], rel_tol=0, patience=3) == 7
    # negative losses: relative to |best|
    assert stopping_epoch([-1.0, -1.001, -1.002, -1.003], patience=2) == 2
    assert stopping_epoch([-1.0, -1.1, -1.2, -1.3], patience=2) is None


@pytest.mark.parametrize("rel_tol, patience", [(0.005, 5), (0.0, 1), (0.05, 3), (0.001, 10)])
def test_matches_the_plain_loop_on_noisy_curves(rel_tol, patience):
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        trend = 1 + np.exp(-np.arange(n) / rng.uniform(1, 20))
        curve = trend * (1 + rng.uniform(0, 0.05) * rng.standard_normal(n))
        curve[rng.random(n) < 0.02] = np.nan
        assert stopping_epoch(curve, rel_tol, patience) == plain_stopping_epoch(
            curve, rel_tol, patience
        ), curve


def test_bad_rules_and_curves_are_refused():
    with pytest.raises(ValueError, match=r"rel_tol must be in \[0, 1\)"):
        stopping_epoch([1.0], rel_tol=1.0)
    with pytest.raises(ValueError, match="rel_tol"):
        stopping_epoch([1.0], rel_tol=-0.1)
    with pytest.raises(ValueError, match="patience"):
        stopping_epoch([1.0], patience=0)
    with pytest.raises(ValueError, match="one loss per epoch"):
        stopping_epoch(np.ones((3, 2)))


def test_convergence_record():
    curve = 1 + 2.0 ** -np.arange(14)
    c = Convergence.of_curve(curve, max_epochs=20)
    assert c.converged and (c.epochs_used, c.max_epochs, c.best_epoch) == (14, 20, 13)
    assert (
        c.criterion
        == criterion_text()
        == ("less than 0.5 % relative improvement of the best validation loss over 5 epochs")
    )
    assert c.no_verdict is None and c.describe().startswith("converged after 14 of at most 20")
    assert Convergence.from_attrs(c.to_attrs()) == c
    assert Convergence.from_attrs({"epochs": 3}) is None  # an older file: no record
    # the cap came first
    short = Convergence.of_curve(curve[:10], max_epochs=10)
    assert not short.converged and short.epochs_used == 10
    assert short.no_verdict == "not converged after 10 epochs — no verdict"
    # no validation curve: never converged
    none = Convergence.of_curve([], max_epochs=3, epochs_used=3)
    assert not none.converged and none.best_epoch == -1
    assert "no validation curve" in none.describe()
    assert Convergence.of_curve([math.nan, 2.0, 1.0, 1.0], max_epochs=9).best_epoch == 2
    assert not_converged_text(1) == "not converged after 1 epoch — no verdict"
    assert criterion_text(0, 1) == "no lower validation loss for 1 epoch"
    with pytest.raises(ValueError, match="converged must be True or False"):
        Convergence("yes", 1, 1, 0, 0.005, 5, "")
    with pytest.raises(ValueError, match="epochs_used"):
        Convergence(True, -1, 1, 0, 0.005, 5, "")


def test_the_one_no_verdict_text():
    # baselines and sequence models count epochs, L-BFGS fits iterations
    assert not_converged_text(7) == "not converged after 7 epochs — no verdict"
    assert not_converged_text(7, "iterations") == "not converged after 7 iterations — no verdict"
    assert not_converged_text(1, "iterations") == "not converged after 1 iteration — no verdict"
    # a file without the record (None; NaN as HDF5 may store it)
    assert not_converged_text(None) == "no convergence recorded — no verdict"
    assert not_converged_text(math.nan, "iterations") == "no convergence recorded — no verdict"
