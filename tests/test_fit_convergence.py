"""Convergence of the fits: the plateau criterion, L-BFGS's own status, the validation split
and early stopping of the epoch fits, their record in the fit file and in the reports."""

import h5py
import numpy as np
import pytest
from reference import random_system

import spinsa
from spinsa import io
from spinsa._convergence import stopping_epoch
from spinsa.fit import FitConfig, load_fit, save_fit
from spinsa.fit.convergence import convergence_words, plateau_index
from spinsa.fit.monitor import split_validation


def small(rng, P=24, N=5, d=3):
    return random_system(rng, P=P, N=N, d=d, dtype=np.float64)[0]


# ----------------------------------------------------------------- the criterion
def test_plateau_index_is_the_one_rule_on_the_evaluated_points():
    # the rule itself is tested in tests/test_convergence.py; here: the fits' reading of it
    curve = [16.0, 8.0, 4.0, 2.0, 1.0, 0.999, 0.998, 0.997, 0.996]
    assert plateau_index(curve, 3, 0.005) == stopping_epoch(curve, 0.005, 3) == 7
    # negative losses (pseudo-likelihoods): improvements are relative to |best|
    assert plateau_index([-1.0, -2.0, -2.001, -2.002], patience=2, min_improvement=0.005) == 3
    # skipped evaluations (NaN, inf) are left out: indices count evaluations
    assert plateau_index([4.0, np.nan, 2.0, np.nan, 2.0, 2.0], 2, 0.005) == 3
    assert plateau_index([4.0, np.inf, 3.0, 2.0], 1, 0.005) is None
    assert plateau_index([1.0, 0.5], patience=5, min_improvement=0.005) is None
    with pytest.raises(ValueError, match=r"min_improvement must be in \[0, 1\)"):
        FitConfig(min_improvement=1.0)


def test_the_words_of_the_reports():
    rec = {"converged": True, "criterion": "c", "iterations": 3, "message": "m"}
    assert convergence_words(rec) == "converged after 3 iterations (c)"
    assert convergence_words({**rec, "converged": False}, "epochs").startswith(
        "not converged after 3 epochs — no verdict"
    )
    assert "not recorded" in convergence_words({"converged": None, "message": ""})


# ----------------------------------------------------------------- L-BFGS
def test_lbfgs_to_convergence_records_its_own_status(rng):
    xi = small(rng)
    res = spinsa.fit_pseudolikelihood(xi, backend="lbfgs", dtype="float64", max_iter=500)
    assert res.converged is True
    assert res.message.startswith("CONVERGENCE")  # scipy's own words
    assert 1 <= res.iterations < 500 and res.iterations == res.n_steps
    assert "gtol = 1e-06" in res.criterion and "max_iter = 500" in res.criterion
    assert res.convergence_line().startswith(f"converged after {res.iterations} iterations")


@pytest.mark.parametrize("constraint", ["global", "row"])
def test_lbfgs_capped_at_one_iteration_is_not_converged(rng, constraint):
    res = spinsa.fit_pseudolikelihood(
        small(rng), backend="lbfgs", max_iter=1, constraint=constraint
    )
    assert res.converged is False and res.iterations == 1
    assert "max_iter = 1" in res.message
    assert "not converged after 1 iteration — no verdict" in res.convergence_line()


# ----------------------------------------------------------------- epoch fits
TORCH = dict(backend="torch", device="cpu", batch_size=8, lr=0.02, seed=3)


def test_validation_split_is_seeded_and_disjoint(rng):
    xi = small(rng, P=20)
    train, val = split_validation(xi, 0.25, seed=1)
    assert train.shape[0] == 15 and val.shape[0] == 5
    rows = {r.tobytes() for r in xi}
    assert {r.tobytes() for r in train} | {r.tobytes() for r in val} == rows
    assert not {r.tobytes() for r in train} & {r.tobytes() for r in val}
    np.testing.assert_array_equal(split_validation(xi, 0.25, seed=1)[1], val)
    assert split_validation(xi, 0.0, seed=1)[1] is None
    with pytest.raises(ValueError, match="both must be at least 1"):
        split_validation(xi, 0.01, seed=1)


def test_default_fit_is_unchanged_by_the_convergence_options(rng):
    """validation_fraction = 0 and no early stopping: the same couplings as before, and the
    stored config does not name the new options (so old checkpoints and stages match)."""
    xi = small(rng)
    a = spinsa.fit_pseudolikelihood(xi, epochs=3, **TORCH)
    b = spinsa.fit_pseudolikelihood(xi, epochs=3, patience=2, **TORCH)
    np.testing.assert_array_equal(a.J, b.J)
    assert a.val_loss.size == 0 and a.iterations == 3 and isinstance(a.converged, bool)
    assert "patience" not in a.config.to_dict() and b.config.to_dict()["patience"] == 2
    with pytest.raises(ValueError, match="early_stopping is an option of backend='torch'"):
        FitConfig(backend="lbfgs", early_stopping=True)
    with pytest.raises(ValueError, match=r"validation_fraction must be in \[0, 1\)"):
        FitConfig(validation_fraction=1.0)


@pytest.mark.parametrize("method", ["pl", "cd", "bptt"])
def test_validation_curve_and_early_stopping(rng, method):
    xi = small(rng)
    opts = dict(method=method, validation_fraction=0.25, epochs=40, patience=2, **TORCH)
    res = spinsa.fit_pseudolikelihood(xi, early_stopping=True, min_improvement=0.05, **opts)
    n = res.iterations
    assert res.converged and n < 40 and res.n_epochs == n and "stopped early" in res.message
    assert res.val_loss.shape == (n + 1,) and np.isfinite(res.val_loss).all()
    assert np.isfinite(res.loss)
    # the criterion holds where the fit stopped, not one evaluation before
    curve = res.val_loss
    assert plateau_index(curve, 2, 0.05) == n and plateau_index(curve[:-1], 2, 0.05) is None
    assert "validation" in res.criterion and "5 % over 2 evaluations" in res.criterion
    # without early stopping the same fit runs on; its curve starts the same way
    full = spinsa.fit_pseudolikelihood(xi, min_improvement=0.05, **{**opts, "epochs": n + 2})
    assert full.iterations == n + 2 and full.converged
    np.testing.assert_allclose(full.val_loss[: n + 1], res.val_loss, rtol=1e-6)


def test_pl_validation_loss_is_the_pseudo_likelihood_of_the_held_out_patterns(rng):
    xi = small(rng)
    res = spinsa.fit_pseudolikelihood(xi, validation_fraction=0.25, epochs=2, **TORCH)
    _, val = split_validation(xi.astype(np.float32), 0.25, seed=TORCH["seed"])
    expected = spinsa.pl_loss_and_grad(val, res.J, res.config.lam)[0]
    assert res.val_loss[-1] == pytest.approx(expected, rel=1e-5)


def test_kill_and_resume_keeps_the_validation_curve(rng, tmp_path):
    class Killed(Exception):
        pass

    def kill(step, J):
        if step == 7:
            raise Killed

    xi = small(rng)
    opts = dict(validation_fraction=0.25, epochs=4, early_stopping=True, **TORCH)
    full = spinsa.fit_pseudolikelihood(xi, **opts)
    with pytest.raises(Killed):
        spinsa.fit_pseudolikelihood(xi, checkpoint=tmp_path / "c.h5", callback=kill, **opts)
    resumed = spinsa.fit_pseudolikelihood(xi, checkpoint=tmp_path / "c.h5", **opts)
    assert resumed.resumed_from > 0
    np.testing.assert_allclose(resumed.val_loss, full.val_loss, rtol=1e-6)
    assert (resumed.converged, resumed.iterations) == (full.converged, full.iterations)


# ----------------------------------------------------------------- files
def test_convergence_round_trips_through_hdf5(rng, tmp_path):
    xi = small(rng)
    res = spinsa.fit_pseudolikelihood(xi, validation_fraction=0.25, epochs=3, **TORCH)
    res.save(tmp_path / "fit.h5")
    back = load_fit(tmp_path / "fit.h5")
    assert back.convergence() == res.convergence()
    np.testing.assert_array_equal(back.val_loss, res.val_loss)
    a = io.read(tmp_path / "fit.h5").attrs
    assert a["criterion"] == res.criterion and a["iterations"] == 3
    # without a split the file keeps its old layout: no history/val_loss
    plain = spinsa.fit_pseudolikelihood(xi, backend="lbfgs", max_iter=3)
    save_fit(tmp_path / "plain.h5", plain)
    with h5py.File(tmp_path / "plain.h5") as f:
        assert "val_loss" not in f["history"]
    assert load_fit(tmp_path / "plain.h5").convergence() == plain.convergence()


def test_a_fit_file_written_before_the_record_still_loads(rng, tmp_path):
    """The layout of earlier versions: no criterion, iterations nor val_loss."""
    res = spinsa.fit_pseudolikelihood(small(rng), backend="lbfgs", max_iter=3)
    root = {"loss": res.loss, "wall_time": 1.0, "device": "cpu", "converged": False,
            "message": "reached max_iter = 3 iterations", "resumed_from": 0,
            "n_samples_seen": 1}  # fmt: skip
    history = {k: v for k, v in res.history().items() if k != "val_loss"}
    io.write_file(tmp_path / "old.h5", {"J": res.J, "history": history}, root, kind="fit",
                  config=res.config)  # fmt: skip
    old = load_fit(tmp_path / "old.h5")
    # the iterations counted from the history (one step per L-BFGS iteration)
    assert old.converged is False and old.criterion == "" and old.iterations == 3
    assert old.val_loss.size == 0
    assert "not converged after 3 iterations — no verdict" in old.convergence_line()
