"""The two fit backends on a planted problem, the constraints, the preset, checkpoints, the CLI."""

import warnings

import numpy as np
import pytest
from damage import flip_byte
from reference import random_system

import spinsa
from spinsa import io
from spinsa.fit import FitConfig, FitResult, load_fit

torch = pytest.importorskip("torch")

N, D, P = 16, 6, 40
LAM = 5.0
L_ZERO = N * np.log(N - 1) / LAM  # |L(J = 0)|


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def planted(rng):
    """Random unit patterns, N = 16, d = 6, P = 40 (float32)."""
    xi = rng.standard_normal((P, N, D))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    return xi.astype(np.float32)


def small(rng, P=12, N=6, d=3):
    return random_system(rng, P=P, N=N, d=d, dtype=np.float32)[0]


TORCH = dict(backend="torch", batch_size=P, optimizer="adam", lr=0.01, epochs=60)
LBFGS = dict(backend="lbfgs")


# ----------------------------------------------------------------- planted problem
@pytest.mark.parametrize("constraint, norm", [("global", 4.0), ("row", 1.0)])
def test_both_backends_lower_the_loss_and_agree(planted, constraint, norm):
    opts = dict(lam=LAM, constraint=constraint, norm=norm, init="normal", seed=1)
    a = spinsa.fit_pseudolikelihood(planted, **LBFGS, **opts)
    b = spinsa.fit_pseudolikelihood(planted, **TORCH, **opts)
    for res in (a, b):
        assert isinstance(res, FitResult)
        assert res.loss < res.epoch_loss[0] - 0.05 * L_ZERO
        np.testing.assert_allclose(
            res.loss, spinsa.pl_loss_and_grad(planted, res.J, LAM)[0], rtol=1e-5
        )
    assert abs(a.loss - b.loss) < 0.02 * L_ZERO
    # L-BFGS reports whether every row met a tolerance (in float32 a line search can stop a
    # row early, close to the optimum); minibatch Adam whether its loss reached a plateau
    assert isinstance(a.converged, bool) and isinstance(b.converged, bool)
    assert "L-BFGS-B" in a.criterion and "0.5 % over 5 evaluations" in b.criterion
    assert b.iterations == 60 and a.iterations >= 1


def test_lbfgs_reaches_a_constrained_stationary_point(planted):
    res = spinsa.fit_pseudolikelihood(
        planted,
        backend="lbfgs",
        lam=LAM,
        constraint="global",
        norm=4.0,
        init="normal",
        dtype="float64",
        gtol=1e-9,
    )
    _, g = spinsa.pl_loss_and_grad(planted.astype(np.float64), res.J, LAM)
    jhat = res.J.ravel() / np.linalg.norm(res.J)
    tangent = g.ravel() - (g.ravel() @ jhat) * jhat
    # at the optimum on the sphere the gradient is radial, pointing inwards
    assert np.linalg.norm(tangent) < 1e-4 * np.linalg.norm(g)
    assert g.ravel() @ jhat < 0


def test_l2_penalty_stationary_point(planted):
    res = spinsa.fit_pseudolikelihood(
        planted, backend="lbfgs", lam=LAM, constraint="l2", l2=0.5, dtype="float64", gtol=1e-9
    )
    _, g = spinsa.pl_loss_and_grad(planted.astype(np.float64), res.J, LAM)
    assert np.linalg.norm(g + 0.5 * res.J) < 1e-5 * np.linalg.norm(g)
    assert res.epoch_grad_norm[-1] < 1e-5 * res.epoch_grad_norm[0]


def test_torch_with_l2_penalty_lowers_the_loss(rng):
    xi = small(rng)
    res = spinsa.fit_pseudolikelihood(
        xi, backend="torch", constraint="l2", l2=0.1, epochs=20, batch_size=4, lr=0.01
    )
    assert res.loss < res.epoch_loss[0]
    assert res.n_steps == 20 * 3


# ----------------------------------------------------------------- constraints
@pytest.mark.parametrize(
    "opts",
    [
        dict(backend="torch", epochs=3, batch_size=5, optimizer="adam", lr=0.05),
        dict(backend="torch", epochs=3, batch_size=5, optimizer="sgd", lr=1.0, clip=0.5),
        dict(backend="torch", epochs=3, batch_size=5, project_grad=False, lr=0.05),
        dict(backend="lbfgs", max_iter=8),
    ],
)
@pytest.mark.parametrize("constraint", ["global", "row"])
def test_norm_constraint_holds_after_every_step(rng, opts, constraint):
    xi = small(rng)
    N = xi.shape[1]
    seen = []

    def check(step, J):
        assert J.shape == (N, N, 3, 3)
        assert np.all(J[np.arange(N), np.arange(N)] == 0)
        if constraint == "global":
            seen.append(np.linalg.norm(J))
        else:
            seen.append(np.linalg.norm(J.reshape(N, -1), axis=1))

    res = spinsa.fit_pseudolikelihood(xi, constraint=constraint, norm=2.0, callback=check, **opts)
    assert len(seen) == res.n_steps > 0
    np.testing.assert_allclose(np.array(seen), 2.0, rtol=1e-5)
    if constraint == "global":
        np.testing.assert_allclose(res.step_norm, 2.0, rtol=1e-5)
    assert np.all(res.J[np.arange(N), np.arange(N)] == 0)
    assert res.loss < res.epoch_loss[0]


def test_initial_norm_is_kept_when_norm_is_none(rng):
    xi = small(rng)
    J0 = random_system(rng, P=1, N=6, d=3)[1].astype(np.float32)
    res = spinsa.fit_pseudolikelihood(xi, J0, backend="lbfgs", constraint="row", max_iter=5)
    np.testing.assert_allclose(
        np.linalg.norm(res.J.reshape(6, -1), axis=1),
        np.linalg.norm(J0.reshape(6, -1), axis=1),
        rtol=1e-5,
    )


# ----------------------------------------------------------------- the preset
def test_damico2024_preset_one_site_per_minibatch(rng):
    xi = small(rng, P=10, N=7, d=3)
    states = []
    res = spinsa.fit_pseudolikelihood(
        xi, preset="damico2024", epochs=2, batch_size=4, callback=lambda step, J: states.append(J)
    )
    cfg = res.config
    assert cfg.preset == "damico2024" and cfg.site_sampling == "one"
    assert res.n_steps == 2 * 3 == len(states)
    # initialisation U(-1/2, 1/2)/d^2 with zero diagonal blocks, and its RMS kept
    from spinsa.fit.api import initial_couplings

    init_rng = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(2)[0])
    J0 = initial_couplings(7, 3, "uniform", init_rng, np.float32)
    assert np.abs(J0).max() <= 0.5 / 9 and np.all(J0[np.arange(7), np.arange(7)] == 0)
    np.testing.assert_allclose(res.step_norm, np.linalg.norm(J0), rtol=1e-5)
    # first step: AdamW moves one row only; weight decay and the RMS rescaling are uniform
    J1 = states[0]
    ratio = np.array(
        [
            np.linalg.norm(J1[k] - (np.vdot(J1[k], J0[k]) / np.vdot(J0[k], J0[k])) * J0[k])
            / np.linalg.norm(J1[k])
            for k in range(7)
        ]
    )
    assert np.sum(ratio > 1e-3) == 1 and np.sum(ratio < 1e-5) == 6


def test_runs_are_seeded_and_deterministic(rng):
    xi = small(rng)
    opts = dict(backend="torch", epochs=2, batch_size=5, init="normal")
    a = spinsa.fit_pseudolikelihood(xi, seed=3, **opts)
    b = spinsa.fit_pseudolikelihood(xi, seed=3, **opts)
    c = spinsa.fit_pseudolikelihood(xi, seed=4, **opts)
    np.testing.assert_array_equal(a.J, b.J)
    np.testing.assert_array_equal(a.step_loss, b.step_loss)
    assert not np.allclose(a.J, c.J)


# ----------------------------------------------------------------- checkpoints
class Killed(Exception):
    pass


def _killer(at_step):
    def callback(step, J):
        if step == at_step:
            raise Killed

    return callback


@pytest.mark.parametrize(
    "opts, kill_at",
    [
        (dict(backend="torch", epochs=4, batch_size=5, optimizer="adamw", lr=0.05), 8),
        (dict(preset="damico2024", epochs=4, batch_size=5), 7),
        (
            dict(
                backend="torch",
                epochs=4,
                batch_size=5,
                optimizer="sgd",
                lr=0.5,
                dtype="float64",
                constraint="l2",
            ),
            10,
        ),
        # float32 L-BFGS stops on its line search after 6 steps here: kill in segment 2
        (dict(backend="lbfgs", max_iter=12, segment_iters=3, gtol=1e-12, ftol=1e-14), 5),
        (
            dict(
                backend="lbfgs",
                constraint="row",
                max_iter=12,
                segment_iters=3,
                gtol=1e-12,
                ftol=1e-14,
            ),
            5,
        ),
    ],
)
def test_kill_and_resume_gives_the_uninterrupted_result(rng, tmp_path, opts, kill_at):
    xi = small(rng)
    full = spinsa.fit_pseudolikelihood(xi, checkpoint=tmp_path / "a.h5", **opts)
    ckpt = tmp_path / "b.h5"
    with pytest.raises(Killed):
        spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, callback=_killer(kill_at), **opts)
    assert ckpt.exists()
    resumed = spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, **opts)
    assert resumed.resumed_from > 0
    np.testing.assert_allclose(resumed.J, full.J, rtol=0, atol=1e-6)
    np.testing.assert_allclose(resumed.step_loss, full.step_loss, rtol=1e-6)
    np.testing.assert_allclose(resumed.epoch_loss, full.epoch_loss, rtol=1e-6)
    assert resumed.n_steps == full.n_steps
    # a finished checkpoint returns its result without fitting again
    again = spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, callback=_killer(1), **opts)
    np.testing.assert_array_equal(again.J, resumed.J)


def test_checkpoint_of_another_fit_is_refused(rng, tmp_path):
    xi = small(rng)
    ckpt = tmp_path / "c.h5"
    spinsa.fit_pseudolikelihood(xi, backend="torch", epochs=1, batch_size=6, checkpoint=ckpt)
    with pytest.raises(ValueError, match="lr: 0.001 -> 0.01"):
        spinsa.fit_pseudolikelihood(
            xi, backend="torch", epochs=1, batch_size=6, lr=0.01, checkpoint=ckpt
        )
    with pytest.raises(ValueError, match="other training data"):
        spinsa.fit_pseudolikelihood(
            xi[:-1], backend="torch", epochs=1, batch_size=6, checkpoint=ckpt
        )
    flip_byte(ckpt, "state/couplings")  # a bad disk: refused, never resumed from
    with pytest.raises(io.SpinsaFileError, match="checksum failed.*Delete this checkpoint"):
        spinsa.fit_pseudolikelihood(xi, backend="torch", epochs=1, batch_size=6, checkpoint=ckpt)


def test_result_round_trips_through_hdf5(rng, tmp_path):
    xi = small(rng)
    res = spinsa.fit_pseudolikelihood(xi, backend="lbfgs", max_iter=4)
    res.save(tmp_path / "fit.h5")
    back = load_fit(tmp_path / "fit.h5")
    assert back.config == res.config
    np.testing.assert_array_equal(back.J, res.J.astype(np.float32))
    np.testing.assert_array_equal(back.step_loss, res.step_loss)
    np.testing.assert_array_equal(back.epoch_grad_norm, res.epoch_grad_norm)
    assert back.message == res.message and back.device == res.device
    with pytest.raises(FileExistsError):
        res.save(tmp_path / "fit.h5")


# ----------------------------------------------------------------- bad input
def test_warm_start_must_match_the_data(rng):
    xi = small(rng)  # N = 6, d = 3
    with pytest.raises(ValueError, match=r"J0 has shape \(6, 6, 4, 4\).*d = 3"):
        spinsa.fit_pseudolikelihood(xi, np.zeros((6, 6, 4, 4)), backend="lbfgs")
    with pytest.raises(ValueError, match="N = 6 tokens"):
        spinsa.fit_pseudolikelihood(xi, np.zeros((5, 5, 3, 3)), backend="lbfgs")
    J0 = np.ones((6, 6, 3, 3))
    with pytest.warns(UserWarning, match="diagonal blocks"):
        res = spinsa.fit_pseudolikelihood(xi, J0, backend="lbfgs", max_iter=2)
    assert np.all(res.J[np.arange(6), np.arange(6)] == 0)
    J0 = np.zeros((6, 6, 3, 3))
    J0[0, 1] = 1.0
    with pytest.raises(ValueError, match="rows .* zero"):
        spinsa.fit_pseudolikelihood(xi, J0, backend="lbfgs", constraint="row")
    with pytest.raises(ValueError, match="zero"):
        spinsa.fit_pseudolikelihood(xi, np.zeros((6, 6, 3, 3)), backend="lbfgs")


def test_bad_patterns_are_refused_by_the_fit(rng):
    xi = small(rng)
    bad = xi.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        spinsa.fit_pseudolikelihood(bad, backend="lbfgs")
    with pytest.raises(ValueError, match="empty"):
        spinsa.fit_pseudolikelihood(xi[:0], backend="lbfgs")
    with pytest.warns(UserWarning, match="not unit spins"):
        spinsa.fit_pseudolikelihood(2 * xi, backend="lbfgs", max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = spinsa.fit_pseudolikelihood(
            2 * xi, backend="lbfgs", max_iter=1, unit_spins="normalize", norm=1.0
        )
    assert res.n_steps == 1


# ----------------------------------------------------------------- command line
# `spinsa train --patterns FILE | --random-patterns P N D` fits given spins (the old `spinsa fit`)
def test_cli_train_random_patterns_and_refusal(tmp_path, capsys):
    from spinsa.cli import main

    out = tmp_path / "fit.h5"
    argv = ["train", "--random-patterns", "12", "5", "3", "--backend", "lbfgs",
            "--max-iter", "5", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    res = load_fit(out)
    assert res.J.shape == (5, 5, 3, 3) and res.config.max_iter == 5
    from spinsa.datasets import random_patterns

    direct = spinsa.fit_pseudolikelihood(random_patterns(12, 5, 3, seed=0), config=res.config)
    np.testing.assert_array_equal(res.J, direct.J)  # the same patterns, the same fit
    assert not (tmp_path / "fit.h5.ckpt.h5").exists()
    printed = capsys.readouterr().out
    assert "wrote" in printed
    # how the fit ended, by its criterion
    assert res.convergence_line() in printed and "L-BFGS-B stopped on its own" in printed
    assert main(argv) == 4  # the output exists: a file error
    assert "already exists" in capsys.readouterr().err


def test_cli_train_from_toml_and_npy(tmp_path, rng):
    from spinsa import io
    from spinsa.cli import main

    xi = small(rng)
    np.save(tmp_path / "xi.npy", xi)
    (tmp_path / "fit.toml").write_text(
        '[fit]\nbackend = "torch"\nepochs = 2\nbatch_size = 4\nlam = 3.0\n'
    )
    argv = ["train", str(tmp_path / "fit.toml"), "--patterns", str(tmp_path / "xi.npy"),
            "--lr", "0.01", "--no-progress", "--out", str(tmp_path / "fit.h5")]  # fmt: skip
    assert main(argv) == 0
    info = io.read(tmp_path / "fit.h5")
    assert info.kind == "fit"
    assert info.config["lam"] == 3.0 and info.config["lr"] == 0.01
    assert info.datasets["J"][0] == (6, 6, 3, 3)
    assert info.datasets["history/step_loss"][0] == (6,)
    assert info.attrs["data.path"].endswith("xi.npy")


def test_cli_train_estimate_needs_no_data(tmp_path, capsys):
    from spinsa.cli import main

    # 3 x 10^8 patterns would need about 1.7 TiB: the estimate reads the sizes only
    argv = ["train", "--random-patterns", "300000000", "196", "8", "--estimate",
            "--out", str(tmp_path / "x.h5")]  # fmt: skip
    assert main(argv) == 0
    assert "TiB" in capsys.readouterr().out
    assert not (tmp_path / "x.h5").exists()


def test_cli_train_bad_input(tmp_path, capsys):
    from spinsa.cli import main

    assert main(["train", "--patterns", str(tmp_path / "missing.npy"), "-o", "x.h5"]) == 4
    assert "does not exist" in capsys.readouterr().err
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 3, 2)), b=np.zeros((2, 3, 2)))
    assert main(["train", "--patterns", str(tmp_path / "two.npz"), "-o", "x.h5"]) == 2
    assert "--key" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: both sources at once
        main(["train", "--patterns", "a.npy", "--random-patterns", "1", "2", "3", "-o", "x"])
    assert main(["train", "--random-patterns", "4", "3", "2", "--backend", "newton",
                 "-o", str(tmp_path / "x.h5")]) == 2  # fmt: skip
    assert "backend" in capsys.readouterr().err


def test_cli_rerun_after_a_kill_resumes(tmp_path, rng, capsys):
    from spinsa.cli import main

    xi = small(rng)
    np.save(tmp_path / "xi.npy", xi)
    opts = dict(backend="torch", epochs=3, batch_size=4, lr=0.01)
    config = FitConfig(**opts)
    full = spinsa.fit_pseudolikelihood(xi, config=config)
    out = tmp_path / "fit.h5"
    with pytest.raises(Killed):  # the same fit, killed in its third epoch
        spinsa.fit_pseudolikelihood(
            xi, config=config, checkpoint=tmp_path / "fit.h5.ckpt.h5", callback=_killer(8)
        )
    flags = "--backend torch --epochs 3 --batch-size 4 --lr 0.01 --no-progress".split()
    argv = ["train", "--patterns", str(tmp_path / "xi.npy"), *flags, "--out", str(out)]
    assert main(argv) == 0
    assert "resuming the fit from" in capsys.readouterr().out
    res = load_fit(out)
    assert res.resumed_from == 2
    np.testing.assert_allclose(res.J, full.J, rtol=0, atol=1e-6)


def test_eval_every_skips_full_batch_evaluations_but_not_the_last(planted):
    opts = dict(lam=LAM, constraint="global", norm=4.0, init="normal", seed=1)
    every = spinsa.fit_pseudolikelihood(planted, **{**TORCH, "epochs": 5}, **opts)
    sparse = spinsa.fit_pseudolikelihood(planted, **{**TORCH, "epochs": 5}, eval_every=2, **opts)
    np.testing.assert_array_equal(every.J, sparse.J)  # the steps do not depend on it
    assert np.isnan(sparse.epoch_loss[[1, 3]]).all()  # epochs 1 and 3 (index 0: the start)
    np.testing.assert_allclose(sparse.epoch_loss[[0, 2, 4, 5]], every.epoch_loss[[0, 2, 4, 5]])
    assert sparse.loss == pytest.approx(every.loss)
