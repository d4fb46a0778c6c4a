"""Sequences: splits, the spin encoding, the references, the spin forecaster, the pipeline."""

import json
import re
import shutil

import h5py
import numpy as np
import pytest

from spinsa import PatchEmbedding, io
from spinsa.cli import EXIT_CODES, main
from spinsa.report import write_sequences_report
from spinsa.sequences.data import split_series, synthetic_series, windows
from spinsa.sequences.encoding import SeriesEmbedding
from spinsa.sequences.forecast import SpinForecaster, best_step, fit_forecaster
from spinsa.sequences.references import fit_ar, persistence, reference_forecasts
from tests.damage import flip_byte


# ---------------------------------------------------------------- data
def test_ett_split_by_time_and_normalised_on_training_only():
    values = np.arange(20_000, dtype=float)
    s = split_series(values, context=50)
    assert s.rows == (8640, 2880, 2880)  # 12 / 4 / 4 months of 30 days, hourly
    assert s.train.size == 8640 and s.val.size == 2880 + 50 and s.test.size == 2880 + 50
    assert s.mean == pytest.approx(values[:8640].mean())
    assert s.std == pytest.approx(values[:8640].std())
    # the first validation window looks back into training; its target is the first val row
    np.testing.assert_allclose(s.val[50] * s.std + s.mean, 8640)
    np.testing.assert_allclose(s.test[-1] * s.std + s.mean, 8640 + 2 * 2880 - 1)
    daily = split_series(values[:700], context=5, step_seconds=86_400)
    assert daily.rows == (360, 120, 120)


@pytest.mark.parametrize(
    "values, message",
    [
        (np.arange(100.0), "needs 14400"),
        (np.r_[np.arange(15_000.0), np.nan], "non-finite value at row 15000"),
        (np.ones(15_000), "constant"),
    ],
)
def test_bad_series_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        split_series(values, context=50)


def test_windows_slide_by_one():
    w = windows(np.arange(6), 3)
    np.testing.assert_array_equal(w, [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]])


# ---------------------------------------------------------------- encoding
@pytest.mark.parametrize("k", [1, 2, 5])
def test_series_embedding_is_patch_embedding_on_a_row(k):
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 3, (7, 20))
    emb = SeriesEmbedding(20, lo=-1.0, hi=3.0, k=k)
    x = emb.encode(w)
    assert x.shape == (7, 20 // k, 2 * k)
    np.testing.assert_allclose(np.linalg.norm(x, axis=2), 1.0, atol=1e-6)
    np.testing.assert_allclose(emb.decode(x), w, atol=1e-5)
    # the same numbers as PatchEmbedding on the image of one row with k channels
    p = ((w + 1) / 4).reshape(7, 1, 20 // k, *((k,) if k > 1 else ()))
    reference = PatchEmbedding((1, 20 // k), patch=1, channels=k).encode(p)
    np.testing.assert_allclose(x, reference, atol=1e-6)
    # values out of the training range are clipped to it
    np.testing.assert_allclose(emb.decode(emb.encode(np.full((1, 20), 9.0))), 3.0, atol=1e-5)


def test_series_embedding_refuses_bad_shapes():
    with pytest.raises(ValueError, match="multiple of k"):
        SeriesEmbedding(21, lo=0, hi=1, k=2)
    with pytest.raises(ValueError, match="lo < hi"):
        SeriesEmbedding(20, lo=1, hi=1)
    with pytest.raises(ValueError, match=r"shape \(P, 20\)"):
        SeriesEmbedding(20, lo=0, hi=1).encode(np.zeros((3, 21)))


# ---------------------------------------------------------------- references
def test_ar_recovers_an_ar2_process():
    x = synthetic_series("ar2", 20_000, seed=1)
    w = windows(x, 3)
    ar = fit_ar(w[:, :-1], w[:, -1], 2)
    np.testing.assert_allclose(ar.coef, [-0.8, 1.6], atol=0.02)  # oldest lag first
    assert abs(ar.intercept) < 0.05
    refs = reference_forecasts(ar, w[:5, :-1])
    assert set(refs) == {"persistence", "training mean", "AR(2)"}
    np.testing.assert_array_equal(refs["persistence"], persistence(w[:5, :-1]))
    np.testing.assert_array_equal(refs["training mean"], 0.0)


# ---------------------------------------------------------------- the spin forecaster
@pytest.fixture(scope="module")
def sines():
    s = split_series(synthetic_series("sines", 900, seed=2), 12, rows=(600, 150, 150))
    forecaster, fit = fit_forecaster(s.train, 12, backend="lbfgs", max_iter=15, lam=5.0, steps=6)
    return s, forecaster, fit


def test_forecaster_masks_the_last_token_and_reads_it(sines):
    s, f, fit = sines
    assert f.J.shape == (13, 13, 2, 2) and f.context == 12
    X = windows(s.val, 13)
    x0 = f.inputs(X[:, :-1])
    assert np.all(x0[:, -1] == 0) and np.allclose(np.linalg.norm(x0[:, :-1], axis=2), 1)
    forecasts, final = f.trajectories(X[:, :-1])
    assert forecasts.shape == (7, X.shape[0]) and final.shape == (X.shape[0], 13, 2)
    np.testing.assert_allclose(forecasts[0], f.embedding.lo)  # t = 0: the zero spin
    t, mse = best_step(forecasts, X[:, -1])
    assert 1 <= t <= 6 and mse[t] == mse[1:].min()
    np.testing.assert_allclose(f.forecast(X[:4, :-1], t), forecasts[t, :4], atol=1e-6)
    rolled = f.rolling(X[0, :-1], 3, t)
    assert rolled.shape == (3,)
    assert rolled[0] == pytest.approx(forecasts[t, 0], abs=1e-6)


def test_persistence_start_is_persistence_exactly_at_t0(sines):
    """The denoising start: the last token is the encoded last value, and the forecast at
    t = 0 is that value itself, also outside the training range (where the encoding clips)
    and for k > 1."""
    s, f, _ = sines
    fp = SpinForecaster(f.J, f.embedding, lam=f.lam, gamma=f.gamma, steps=4, start="persistence")
    X = windows(s.test, 13)[:, :-1].copy()
    X[0, -1] = f.embedding.hi + 3.0  # clipped by the encoding, not by the forecast at t = 0
    x0 = fp.inputs(X)
    np.testing.assert_array_equal(x0[:, -1], fp.embedding.encode(np.hstack([X, X[:, -1:]]))[:, -1])
    forecasts, _ = fp.trajectories(X)
    np.testing.assert_array_equal(forecasts[0], persistence(X))
    np.testing.assert_array_equal(fp.forecast(X, 0), persistence(X))
    # the dynamics moves it: t >= 1 is the spin model's own forecast, decoded
    assert not np.array_equal(forecasts[1], forecasts[0])
    # k = 2: both slots of the predicted token hold the last value
    emb2 = SeriesEmbedding(14, lo=-2.0, hi=2.0, k=2)
    J2 = np.zeros((7, 7, 4, 4), dtype=np.float32)
    f2 = SpinForecaster(J2, emb2, steps=2, start="persistence")
    ctx = np.random.default_rng(0).uniform(-1, 1, (5, 12))
    np.testing.assert_array_equal(f2.trajectories(ctx)[0][0], ctx[:, -1])
    np.testing.assert_allclose(
        emb2.decode(f2.inputs(ctx))[:, 12:], np.repeat(ctx[:, -1:], 2, axis=1), atol=1e-5
    )
    with pytest.raises(ValueError, match="start must be one of 'zero', 'persistence'"):
        SpinForecaster(f.J, f.embedding, start="last")


# ---------------------------------------------------------------- the command
def _daily_csv(path, n=700, seed=3):
    values = synthetic_series("sines", n, seed=seed)
    dates = np.datetime64("2016-07-01") + np.arange(n).astype("timedelta64[D]")
    lines = ["date,HUFL,OT"] + [
        f"{d} 00:00:00,{v / 2:.6f},{v:.6f}" for d, v in zip(dates, values, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# the attributes that write_results stores (the rest of a file's are spinsa.io's own)
_OWN_ATTRS = ("source", "column", "rows", "mean", "std", "best_t", "vs_persistence", "scores",
              "fit_loss", "fit_criterion", "fit_message", "n_attractors", "fraction_unconverged",
              "lifetime_mean", "train_range", "step_seconds", "seconds")  # fmt: skip


def test_sequences_run_on_a_csv_writes_the_table_and_figures(tmp_path):
    csv = _daily_csv(tmp_path / "series.csv")
    out = tmp_path / "out"
    argv = [
        "sequences",
        "run",
        "--quick",
        "--csv",
        str(csv),
        "--context",
        "10",
        "--steps",
        "5",
        "--epochs",
        "1",
        "-o",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    info = io.read(out / "sequences.h5")
    scores = info.attrs["scores"]
    assert set(scores) == {
        "bare SA",
        "bare SA (persistence start)",
        "rnn",
        "transformer",
        "s4d",
        "persistence",
        "training mean",
        "AR(10)",
    }
    truth = info.array("truth")
    assert truth.shape == (120,)
    pers = io.read_group(out / "sequences.h5", "forecasts")[0]["persistence"]
    assert scores["persistence"]["mse"] == pytest.approx(np.mean((pers - truth) ** 2))
    report = (out / "report.md").read_text()
    assert "| bare SA |" in report and "AR(10)" in report
    assert "| bare SA (persistence start) |" in report
    assert "Does the dynamics improve on persistence?" in report
    assert set(info.attrs["best_t"]) == {"zero", "persistence"}
    for start, v in info.attrs["vs_persistence"].items():
        assert v["beats"] == (v["z"] > 3)
        row = f"| {start} | {info.attrs['best_t'][start]} |"
        assert row in report
    spin = io.read_group(out / "sequences.h5", "spin/persistence")[0]
    assert spin["test_mse_t"][0] == pytest.approx(scores["persistence"]["mse"], rel=1e-12)
    # the verdict rests on the fit: from an unconverged one the report draws none
    from spinsa.io.results import read_tree

    tree = read_tree(out / "sequences.h5", "/")[0]
    for converged in (True, False):
        attrs = {k: v for k, v in info.attrs.items() if k in _OWN_ATTRS}
        attrs.update(fit_converged=converged, fit_iterations=40)
        h5 = io.write_file(tmp_path / f"c{converged}.h5", tree, attrs, kind="sequences",
                           config=info.config)  # fmt: skip
        text = write_sequences_report(h5, tmp_path / f"c{converged}.md").read_text()
        no = "not converged after 40 iterations — no verdict"
        assert (no in text) == (not converged)
        assert ("does not beat persistence |" in text or "beats persistence |" in text) == converged
    # one epoch cannot meet the stopping rule: no verdict for the backprop models
    for name in ("rnn", "transformer", "s4d"):
        record = info.attrs["convergence"][name]
        assert (record["converged"], record["epochs_used"], record["max_epochs"]) == (False, 1, 1)
        line = next(x for x in report.splitlines() if x.startswith(f"- {name}: MSE"))
        assert "**not converged after 1 epoch — no verdict**" in line, line
        assert "beats" not in line.split("(against")[0]
    assert "less than 0.5 % relative improvement of the best validation loss over 2" in report
    spin = next(x for x in report.splitlines() if x.startswith("- bare SA: MSE"))
    assert ("no verdict" in spin) != info.attrs["fit_converged"]
    # the same file with every model converged: every model gets its verdict
    h5 = tmp_path / "converged.h5"
    shutil.copy(out / "sequences.h5", h5)
    records = {k: {**v, "converged": True} for k, v in info.attrs["convergence"].items()}
    with h5py.File(h5, "r+") as f:
        f.attrs["convergence"] = "json:" + json.dumps(records)
        f.attrs["fit_converged"] = True
    text = write_sequences_report(h5, tmp_path / "converged.md").read_text()
    assert "— no verdict" not in text
    for name in ("bare SA", "bare SA (persistence start)", "rnn", "transformer", "s4d"):
        line = next(x for x in text.splitlines() if x.startswith(f"- {name}: MSE"))
        assert re.search("(beats|does not beat) the best reference", line), line
    assert (out / "forecasts.png").stat().st_size > 0 and (out / "spin_error.png").exists()
    # run again: the finished fit and the trained models are reused, the numbers are the same
    assert main(argv) == 0
    again = io.read(out / "sequences.h5").attrs["scores"]
    for name in scores:
        assert again[name]["mse"] == pytest.approx(scores[name]["mse"], rel=1e-6)


def test_sequences_run_refuses_other_settings_and_redoes_a_damaged_stage(tmp_path, capsys):
    csv = _daily_csv(tmp_path / "series.csv")
    out = tmp_path / "out"
    argv = ["sequences", "run", "--quick", "--csv", str(csv), "--context", "10", "--steps", "3"]
    argv += ["--no-baselines", "--no-progress", "-o", str(out)]
    assert main(argv) == 0
    scores = io.read(out / "sequences.h5").attrs["scores"]
    capsys.readouterr()
    assert main([*argv, "--lam-eval", "2"]) == EXIT_CODES["usage"]
    err = capsys.readouterr().err
    assert "lam_eval = 1.0 there, 2.0 now" in err and "--overwrite" in err
    assert io.read(out / "sequences.h5").attrs["scores"] == scores  # nothing replaced
    # a file written without the persistence start (or before starts existed) is another
    # setting: the evaluation is refused, naming it
    assert main([*argv, "--starts", "zero"]) == EXIT_CODES["usage"]
    assert "starts = ['zero', 'persistence'] there, ['zero'] now" in capsys.readouterr().err
    flip_byte(out / "fit.h5", "J")  # a bad disk: the stage is set aside and redone
    assert main(argv) == 0
    assert (out / "fit.h5.corrupt").exists()
    assert io.read(out / "sequences.h5").attrs["scores"] == scores
    assert main([*argv, "--lam-eval", "2", "--overwrite"]) == 0
    assert io.read(out / "sequences.h5").config["lam_eval"] == 2.0


def test_sequences_run_refuses_bad_input(tmp_path, capsys):
    assert (
        main(
            [
                "sequences",
                "run",
                "--csv",
                str(tmp_path / "none.csv"),
                "-o",
                str(tmp_path / "o"),
                "--no-progress",
            ]
        )
        == EXIT_CODES["data"]
    )
    csv = _daily_csv(tmp_path / "s.csv")
    code = main(
        [
            "sequences",
            "run",
            "--csv",
            str(csv),
            "--column",
            "XX",
            "-o",
            str(tmp_path / "o"),
            "--no-progress",
        ]
    )
    assert code == EXIT_CODES["usage"]
    assert "OT" in capsys.readouterr().err  # the available columns are named


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--patch", "3"], "--context .10. must be a multiple of --patch .3."),
        (["--patch", "2", "--dim", "3"], "--dim .3. must be at least 2 x --patch .4."),
        (["--context", "200"], "longer than 2 x context"),
        (["--rel-tol", "1.5"], r"--rel-tol must be in \[0, 1\)"),
        (["--patience", "0"], "--patience must be"),
    ],
)
def test_sequences_run_names_the_flag_that_is_wrong(tmp_path, capsys, flags, message):
    csv = _daily_csv(tmp_path / "s.csv")
    out = tmp_path / "o"
    argv = ["sequences", "run", "--csv", str(csv), "--context", "10", *flags, "-o", str(out)]
    assert main([*argv, "--no-progress"]) == EXIT_CODES["usage"]
    assert len(capsys.readouterr().err.strip().splitlines()) <= 2
    assert not out.exists()  # refused before anything is written


def test_rows_split_a_series_of_any_step(tmp_path):
    monthly = np.arange(40.0) + np.sin(np.arange(40.0))
    with pytest.raises(ValueError, match="more than a 30-day month"):
        split_series(monthly, context=3, step_seconds=31 * 86_400)
    s = split_series(monthly, context=3, rows=(20, 10, 10), step_seconds=31 * 86_400)
    assert s.rows == (20, 10, 10) and s.test.size == 13
