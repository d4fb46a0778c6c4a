"""Experiment configs and the train / evaluate / run_experiment pipeline, on synthetic digits."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from tiny_configs import SHARED, TINY, TINY_TOML

import spinsa
import spinsa.datasets
from spinsa import io
from spinsa.analysis.summary import summarize_arrays
from spinsa.experiments import (
    ExperimentConfig,
    ReproduceConfig,
    evaluate,
    evaluate_task,
    load_images,
    read_evaluation,
    run_experiment,
    train,
)
from spinsa.experiments.pipeline import read_run_config
from spinsa.fit import FitConfig
from spinsa.tasks import pixel_mask, reconstruction_errors

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------- config
def test_default_config_is_the_paper_setting():
    c = ExperimentConfig()
    assert c.make_embedding().n_tokens == 196 and c.make_embedding().d == 8
    assert c.fit.lam == 5.0 and c.dynamics.lam_eval == 1.0 and c.dynamics.steps == 100
    assert c.tasks.mask_fraction == 0.3 and c.tasks.noise_variance == 0.7


def test_dict_round_trip():
    assert ExperimentConfig.from_dict(TINY.to_dict()) == TINY
    damico = TINY.with_overrides({"fit.preset": "damico2024", "fit.epochs": 2})
    assert ExperimentConfig.from_dict(damico.to_dict()) == damico


def test_toml_from_file_and_text(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(TINY_TOML)
    assert ExperimentConfig.from_toml(path) == TINY
    assert ExperimentConfig.from_toml(str(path)) == TINY


@pytest.mark.parametrize(
    "text, key, known",
    [
        ("[embedding]\npatchsize = 2\n", "patchsize", "patch, d, seed, scale"),
        ("[data]\nn_trian = 5\n", "n_trian", "dataset, n_train, per_class"),
        ("[fit]\nlamda = 5.0\n", "lamda", "backend, lam, constraint"),
        ("[tasks]\nmask = 0.2\n", "mask", "mask_fraction, noise_variance"),
        ("[dynamic]\nsteps = 3\n", "dynamic", "name, data, embedding, fit, dynamics, tasks"),
    ],
)
def test_unknown_key_is_named_with_the_known_ones(text, key, known):
    with pytest.raises(ValueError, match=f"unknown key '{key}'") as err:
        ExperimentConfig.from_toml(text)
    assert known in str(err.value)


def test_patch_that_does_not_tile_fails_before_any_data(monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("data must not be loaded")

    monkeypatch.setattr(spinsa.datasets, "load_mnist", no_data)
    with pytest.raises(ValueError, match="does not tile") as err:
        ExperimentConfig.from_toml("[embedding]\npatch = 3\n")
    assert "1, 2, 4, 7, 14, 28" in str(err.value)
    with pytest.raises(ValueError, match="too small"):
        ExperimentConfig.from_toml("[embedding]\npatch = 2\nd = 4\n")


def test_with_overrides_by_dotted_key():
    c = TINY.with_overrides({"fit.lam": 2.0, "dynamics.steps": 7, "name": "x"})
    assert (c.fit.lam, c.dynamics.steps, c.name) == (2.0, 7, "x")
    assert c.fit.max_iter == TINY.fit.max_iter  # the rest is kept
    with pytest.raises(ValueError, match="unknown key 'lamda'.*known keys: backend, lam"):
        TINY.with_overrides({"fit.lamda": 2.0})
    with pytest.raises(ValueError, match="unknown key 'model.x'"):
        TINY.with_overrides({"model.x": 1})


def test_fit_preset_override_rebuilds_the_fit_section():
    c = TINY.with_overrides({"fit.preset": "damico2024", "fit.epochs": 3})
    assert c.fit == FitConfig.from_preset("damico2024", epochs=3)


def test_n_train_and_per_class_exclude_each_other():
    with pytest.raises(ValueError, match="exclusive"):
        ExperimentConfig.from_toml("[data]\nn_train = 10\nper_class = 1\n")
    c = TINY.with_overrides({"data.per_class": 5})
    assert (c.data.per_class, c.data.n_train) == (5, None)


@pytest.mark.parametrize(
    "text, match",
    [
        ("[data]\ndataset = 'cifar'\n", "data.dataset"),
        ("[data]\ndataset = 'mnist'\nimage_size = 12\n", "image_size"),
        ("[dynamics]\npreset = 'notebook'\n", "dynamics.preset"),
        ("[dynamics]\nlam_eval = 0\n", "lam_eval"),
        ("[tasks]\nmask_fraction = 1.5\n", "mask_fraction"),
        ("[tasks]\nclamp_visible = 1\n", "clamp_visible"),
        ("[fit]\nbackend = 'adam'\n", "backend"),
        ("name = 'a b'\n", "name"),
    ],
)
def test_bad_values(text, match):
    with pytest.raises(ValueError, match=match):
        ExperimentConfig.from_toml(text)


def test_reproduce_config_models_and_their_overrides():
    cfg = ReproduceConfig.from_toml(
        SHARED
        + "[models.a]\n[models.b]\nfit = { preset = 'damico2024', epochs = 1 }\n"
        + "dynamics = { preset = 'damico2024' }\n"
    )
    exps = cfg.experiments()
    assert list(exps) == ["a", "b"]
    assert exps["a"].fit.backend == "lbfgs" and exps["a"].dynamics.preset == "design"
    assert exps["b"].fit.preset == "damico2024" and exps["b"].dynamics.preset == "damico2024"
    assert exps["b"].data == exps["a"].data
    assert ReproduceConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match=r"unknown key 'fitt' in \[models.c\]"):
        ReproduceConfig.from_toml("[models.c]\nfitt = { lam = 1.0 }\n")
    with pytest.raises(ValueError, match="at least one model"):
        ReproduceConfig.from_toml("[data]\nn_test = 5\n")


@pytest.mark.parametrize("quick", [True, False])
def test_shipped_reproduce_configs_are_the_paper_ones(quick):
    name = "reproduce_quick.toml" if quick else "reproduce_full.toml"
    cfg = ReproduceConfig.from_toml(REPO / "analysis" / "configs" / name)
    assert cfg.experiments() == ReproduceConfig.paper(quick=quick).experiments()
    exps = cfg.experiments()
    assert exps["design"].data.n_train_images == (10_000 if quick else 50_000)
    assert exps["design"].data.n_test == (1_000 if quick else 10_000)


def test_every_shipped_config_parses():
    paths = sorted((REPO / "analysis" / "configs").glob("reproduce_*.toml"))
    assert paths
    for path in paths:
        assert ReproduceConfig.from_toml(path).experiments()


# ------------------------------------------------------------------------------- pipeline
def test_run_file_layout(run_file):
    info = io.read(run_file)
    assert info.kind == "experiment"
    assert read_run_config(run_file) == TINY
    N, d, P, T = 36, 8, 20, 4
    assert info.datasets["J"][0] == (N, N, d, d)
    for task in ("masked", "denoise"):
        arrays, attrs = read_evaluation(run_file, task)
        assert arrays["times"].tolist() == list(range(T + 1))
        for k in ("all", "masked", "visible"):
            assert arrays["errors"][k].shape == (T + 1, P)
            assert arrays["mean"][k].shape == (T + 1,)
        assert arrays["mean_image_corr"].shape == (T + 1, P)
        assert arrays["step_change"].shape == (T,)
        assert arrays["examples"]["images"].shape == (2, 2, 12, 12)  # t = 0, 1 (<= T)
        assert arrays["examples"]["times"].tolist() == [0, 1]
        assert attrs["task"] == task and attrs["steps"] == T and attrs["n_test"] == P
        assert np.isfinite(arrays["errors"]["all"]).all()
    masked, _ = read_evaluation(run_file, "masked")
    assert np.isfinite(masked["errors"]["masked"]).all()
    denoise, _ = read_evaluation(run_file, "denoise")
    assert np.isnan(denoise["errors"]["masked"]).all()  # no mask in denoising


def test_means_and_sems_follow_from_the_per_image_errors(run_file):
    arrays, _ = read_evaluation(run_file, "masked")
    e = arrays["errors"]["all"].astype(np.float64)
    np.testing.assert_allclose(arrays["mean"]["all"], e.mean(axis=1), rtol=1e-6)
    sem = e.std(axis=1, ddof=1) / np.sqrt(e.shape[1])
    np.testing.assert_allclose(arrays["sem"]["all"], sem, rtol=1e-5)


def test_errors_match_a_direct_computation(run_file):
    """Stored errors = decode every recorded state of spinsa.run and compare, by hand."""
    emb = TINY.make_embedding()
    test = load_images(TINY, train=False)
    images = test.test
    J = io.read_array(run_file, "J")
    mask = np.zeros((images.shape[0], emb.n_tokens), bool)  # image k's own stream
    for p, k in enumerate(test.test_index):
        chosen = np.random.default_rng([TINY.tasks.seed, 0, k]).permutation(emb.n_tokens)
        mask[p, chosen[: int(0.3 * emb.n_tokens)]] = True
    x = emb.encode(images)
    x[mask] = 0
    traj = spinsa.run(x, J, 1.0, 4)
    clean = images
    pm = pixel_mask(mask, emb)
    direct = np.stack([((emb.decode(s) - clean) ** 2).mean(axis=(1, 2)) for s in traj.states])
    arrays, _ = read_evaluation(run_file, "masked")
    np.testing.assert_allclose(arrays["errors"]["all"], direct, rtol=1e-4, atol=1e-7)
    masked_err = reconstruction_errors(emb.decode(traj.states[2]), clean, pm).masked
    np.testing.assert_allclose(arrays["errors"]["masked"][2], masked_err, rtol=1e-4, atol=1e-7)
    mean_img = io.read_array(run_file, "data/mean_train_image")
    r = np.corrcoef(emb.decode(traj.states[-1])[5].ravel(), mean_img.ravel())[0, 1]
    np.testing.assert_allclose(arrays["mean_image_corr"][-1, 5], r, rtol=1e-4)


def test_mean_train_image_is_the_mean_of_the_training_images(run_file):
    train_images = load_images(TINY, test=False).train
    np.testing.assert_allclose(
        io.read_array(run_file, "data/mean_train_image"), train_images.mean(axis=0), atol=1e-5
    )


def test_chunking_does_not_change_results(run_file):
    images = load_images(TINY)
    J = io.read_array(run_file, "J")
    a = evaluate_task(TINY, J, images, "denoise", chunk_size=1000)
    b = evaluate_task(TINY, J, images, "denoise", chunk_size=7)
    np.testing.assert_allclose(a.errors.all, b.errors.all, rtol=1e-6)
    np.testing.assert_allclose(a.step_change, b.step_change, rtol=1e-5)
    np.testing.assert_array_equal(a.examples, b.examples)


def test_async_dynamics_do_not_depend_on_chunking(run_file):
    cfg = TINY.with_overrides({"dynamics.update": "async", "dynamics.steps": 2})
    images = load_images(cfg)
    J = io.read_array(run_file, "J")
    a = evaluate_task(cfg, J, images, "masked", chunk_size=1000)
    b = evaluate_task(cfg, J, images, "masked", chunk_size=10)
    np.testing.assert_allclose(a.errors.all, b.errors.all, rtol=1e-6)


def test_run_experiment_is_deterministic(run_file, tmp_path):
    again = run_experiment(TINY, tmp_path / "again.h5")
    for name in ("J", "evaluation/masked/errors/all", "evaluation/denoise/errors/all"):
        np.testing.assert_array_equal(io.read_array(again, name), io.read_array(run_file, name))


def test_run_experiment_refuses_an_existing_file(run_file):
    with pytest.raises(FileExistsError, match="overwrite"):
        run_experiment(TINY, run_file)


def test_train_then_evaluate(tmp_path):
    path = train(TINY, tmp_path / "t.h5", checkpoint=tmp_path / "t.ckpt.h5")
    assert not (tmp_path / "t.ckpt.h5").exists()
    assert "evaluation" not in io.read(path).groups
    evaluate(path, "masked", steps=2)
    arrays, attrs = read_evaluation(path, "masked")
    assert arrays["times"].tolist() == [0, 1, 2] and attrs["steps"] == 2
    with pytest.raises(FileExistsError, match="overwrite"):
        evaluate(path, "masked", steps=2)
    evaluate(path, "masked", steps=3, overwrite=True)
    assert read_evaluation(path, "masked")[0]["times"].size == 4
    out = evaluate(path, "denoise", n_test=5, out=tmp_path / "e.h5")
    assert io.read(out).kind == "evaluation" and io.read(out).attrs["run_file"] == str(path)
    arrays, attrs = read_evaluation(out, "denoise")
    assert arrays["errors"]["all"].shape == (5, 5)
    assert attrs["task"] == "denoise" and attrs["n_test"] == 5 and "summary.best_t" in attrs
    with pytest.raises(ValueError, match="kind"):
        evaluate(_fit_only(tmp_path), "masked")


def test_a_file_that_cannot_be_written_is_refused_before_the_fit(tmp_path, monkeypatch):
    from spinsa.experiments import pipeline

    def no_fit(*args, **kwargs):
        raise AssertionError("nothing may be fitted")

    monkeypatch.setattr(pipeline, "fit_pseudolikelihood", no_fit)
    for make in (train, run_experiment):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            make(TINY, tmp_path / "missing" / "run.h5")


def _fit_only(tmp_path):
    """A spinsa file that is not a run file."""
    return io.write_file(tmp_path / "other.h5", {"a": np.zeros(2)}, kind="fit")


def test_clamp_visible_keeps_visible_pixels(run_file):
    cfg = TINY.with_overrides({"tasks.clamp_visible": True})
    ev = evaluate_task(cfg, io.read_array(run_file, "J"), load_images(cfg), "masked")
    vis = ev.errors.visible
    np.testing.assert_allclose(vis, np.broadcast_to(vis[0], vis.shape), atol=1e-6)


def test_damico_dynamics_in_the_pipeline(run_file):
    cfg = TINY.with_overrides({"embedding.scale": "damico2024", "dynamics.preset": "damico2024"})
    images = load_images(cfg)
    ev = evaluate_task(cfg, io.read_array(run_file, "J"), images, "masked")
    assert np.isfinite(ev.errors.all).all() and ev.errors.all.shape == (5, 20)
    # errors in its pixel space min(2p, 1): the masked input's error is the masked pixels'
    pm = pixel_mask(cfg.tasks.inputs("masked", cfg.make_embedding(), images.test,
                                     images.test_index)[1], cfg.make_embedding())  # fmt: skip
    want = np.where(pm, np.minimum(2 * images.test, 1), 0) ** 2
    np.testing.assert_allclose(ev.errors.all[0], want.mean(axis=(1, 2)), rtol=1e-5, atol=1e-7)


def test_summary_numbers():
    mean = np.array([0.5, 0.2, 0.1, 0.3, 0.4])
    sem = np.full(5, 0.01)
    arrays = {
        "mean": {"all": mean, "masked": mean * 2},
        "sem": {"all": sem},
        "mean_image_corr_mean": np.linspace(0, 0.8, 5),
        "mean_image_corr_sem": np.full(5, 0.01),
        "final_coherence": np.array([0.9, 1.0]),
        "step_change": np.array([0.1, 0.1, 0.05, 0.01]),
    }
    s = summarize_arrays("masked", arrays)
    assert (s["best_t"], s["best_error"], s["error_T"], s["T"]) == (2, 0.1, 0.4, 4)
    assert s["rise_z"] == pytest.approx(0.3 / np.sqrt(2e-4))
    mean[0] = 0.0  # t = 0 does not count for the masked task, it does for denoising
    assert summarize_arrays("masked", arrays)["best_t"] == 2
    assert summarize_arrays("denoise", arrays)["best_t"] == 0
    assert s["coherence_T"] == pytest.approx(0.95)


def test_config_is_a_frozen_dataclass():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TINY.name = "x"


def test_references_are_stored_with_every_evaluation(run_file):
    from spinsa.references import REFERENCES

    for task in ("masked", "denoise"):
        arrays, attrs = read_evaluation(run_file, task)
        assert set(arrays["references"]) == set(REFERENCES[task])
        # the corrupted input is a reference, and it is the model's own t = 0
        first = "masked_input" if task == "masked" else "noisy_input"
        np.testing.assert_allclose(
            arrays["references"][first]["all"], arrays["errors"]["all"][0], rtol=1e-6
        )
        assert set(attrs["reference_params"]) == set(REFERENCES[task])
        s = summarize_arrays(task, arrays)
        assert s["best_reference"] in REFERENCES[task]
        assert s["transient_memory"] == (s["best_reference"] in s["beats"])
    params = read_evaluation(run_file, "denoise")[1]["reference_params"]
    assert params["blur"]["sigma"] in params["blur"]["candidates"]


def test_report_number_formats():
    from spinsa.report import fmt as format_number
    from spinsa.report import pm as format_pm

    assert (format_number(0.123456), format_number(2.0, 1)) == ("0.1235", "2.0")
    assert format_number(None) == format_number(float("nan")) == "n/a"
    assert format_pm(0.5, 0.01) == "0.5000 ± 0.0100"
    assert format_pm(0.5, float("nan")) == "0.5000" and format_pm(float("inf"), 0.1) == "n/a"
