"""Explicit control parameters of a fit: one default backend for the API and the command
line, and a note when a fixed norm is left to the random initial couplings. No torch needed."""

import warnings

import numpy as np
import pytest
from reference import random_system

import spinsa
from spinsa.fit import FitConfig, load_fit


def test_one_default_backend_for_the_api_and_the_command_line():
    from spinsa.experiments import ExperimentConfig

    assert FitConfig().backend == "lbfgs"
    assert ExperimentConfig().fit.backend == "lbfgs"
    # a [fit] table without a backend (TOML, --set) gets the same default
    assert ExperimentConfig.from_dict({"fit": {"lam": 2.0}}).fit.backend == "lbfgs"
    assert FitConfig(method="cd").backend == "torch"  # only torch runs it
    assert FitConfig(couplings="shared").backend == "torch"
    assert FitConfig.from_preset("damico2024").backend == "torch"
    assert FitConfig(backend="torch", epochs=3).epochs == 3
    with pytest.raises(ValueError, match="epochs, lr: option.* of the torch backend"):
        FitConfig(epochs=3, lr=0.1)
    assert FitConfig(**FitConfig().to_dict()) == FitConfig()


def test_an_unchosen_norm_warns_with_the_value_kept(rng):
    xi, _ = random_system(rng, P=3, N=5, d=2)
    with pytest.warns(spinsa.fit.NormWarning, match=r"keeps .* \|J\| = [0-9.]+ .*N=5, d=2"):
        res = spinsa.fit_pseudolikelihood(xi, max_iter=1)
    J0 = spinsa.fit.initial_couplings(5, 2, "uniform", np.random.default_rng(0), np.float64)
    kept = np.linalg.norm(res.J)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a chosen norm, a given J0 or a preset: no note
        spinsa.fit_pseudolikelihood(xi, max_iter=1, norm=kept)
        spinsa.fit_pseudolikelihood(xi, J0=J0, max_iter=1)
        spinsa.fit_pseudolikelihood(xi, max_iter=1, constraint="l2")
    with pytest.warns(spinsa.fit.NormWarning, match="row norms"):
        spinsa.fit_pseudolikelihood(xi, max_iter=1, constraint="row")


def test_spinsa_train_uses_the_same_default_backend_and_prints_the_norm_note(tmp_path, capsys):
    from spinsa.cli import main
    from spinsa.fit import NormWarning

    warnings.simplefilter("default", NormWarning)  # pyproject ignores it in the other tests

    out = tmp_path / "fit.h5"
    argv = ["train", "--random-patterns", "6", "5", "2", "--max-iter", "2", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "spinsa train: warning: constraint='global' with norm=None keeps" in err
    assert "--set fit.norm=" in err
    assert load_fit(out).config.backend == "lbfgs"
    assert main([*argv[:-2], "--set", "fit.norm=2.0", "--out", str(tmp_path / "b.h5")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert np.linalg.norm(load_fit(tmp_path / "b.h5").J) == pytest.approx(2.0, rel=1e-5)
