"""analyze_run on a run file: every group written, the same numbers as in memory, figures."""

import dataclasses
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from tiny_configs import TINY

import spinsa
from spinsa import io
from spinsa.analysis import (
    coupling_spectrum,
    error_lifetimes,
    find_attractors,
    list_analyses,
    load_analysis,
    masked_patch_variances,
    matched_hebbian,
    mean_pattern,
    overlap_lifetimes,
    patch_variance_histograms,
    random_spins,
    strength_vs_distance,
    summarize_lifetimes,
    target_overlaps,
    trajectory_overlaps,
)
from spinsa.analysis.hebbian import compare_with_hebbian, strength_maps
from spinsa.experiments import analyze_run
from spinsa.experiments.analyze import ANALYSES, AnalysisSettings, load_run_inputs
from spinsa.experiments.pipeline import evaluate, load_images, train
from spinsa.plotting import plot_run
from spinsa.tasks import pixel_mask, reconstruction_errors, summarize, task_inputs

SMALL = dict(n_test=12, steps=8, seed=3, attractor_steps=400, n_attractor_starts=4)
EXPECTED = {
    "overlaps": ["mean", "test", "train"],
    "lifetimes": [
        "denoise_error",
        "denoise_overlap",
        "masked_error",
        "masked_overlap",
        "table_error",
        "table_overlap",
    ],
    "attractors": ["images", "report"],
    "hebbian": [
        "comparison",
        "distance",
        "distance_hebbian",
        "errors_denoise",
        "errors_masked",
        "maps",
        "maps_hebbian",
        "spectrum",
        "spectrum_hebbian",
    ],
    "patches": ["best", "clean", "first", "histograms", "last"],
}


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """A run file of the tiny experiment (N = 36 tokens, d = 8), fitted only (no
    evaluations, so its figures are the analyses'), analysed once."""
    path = tmp_path_factory.mktemp("driver") / "run.h5"
    train(TINY, path)
    written = analyze_run(path, **SMALL)
    return path, written


@pytest.fixture
def fresh(tmp_path):
    """A run file without analyses."""
    path = tmp_path / "fresh.h5"
    train(TINY, path)
    return path


def same(a, b, rtol=1e-5, atol=1e-6):
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None:
                assert x is None and y is None, f.name
                continue
            assert np.shape(x) == np.shape(y), f.name
            if np.asarray(x).dtype.kind in "biu":
                np.testing.assert_array_equal(x, y, err_msg=f.name)
            else:
                np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f.name)
        elif isinstance(x, float) and np.isnan(x):
            assert np.isnan(y), f.name
        elif isinstance(x, float):
            assert y == pytest.approx(x, rel=rtol, abs=atol), f.name
        else:
            assert x == y, f.name


def full_trajectory(inputs, J, x0, steps):
    dyn = inputs.config.dynamics
    return spinsa.run(x0, J, dyn.lam_eval, steps, gamma=dyn.gamma, norm=dyn.norm)


def decoded_errors(inputs, states, mask):
    emb = inputs.embedding
    decoded = np.stack([emb.decode_pixels(s) for s in states])
    clean = emb.pixel_space(inputs.test_images)
    pm = None if mask is None else pixel_mask(mask, emb)
    return decoded, reconstruction_errors(decoded, clean, pm)


# --------------------------------------------------------------------------- writing


def test_every_group_is_written_with_its_parameters(analyzed):
    path, written = analyzed
    expected = [f"{name}/{sub}" for name in ANALYSES for sub in EXPECTED[name]]
    assert sorted(written) == sorted(expected)
    assert list_analyses(path) == sorted(expected)
    for name in ANALYSES:
        _, attrs = io.read_group(path, f"analysis/{name}")
        for key, value in SMALL.items():
            assert attrs[key] == value, (name, key)
        assert attrs["lam"] == 1.0 and attrs["analysis"] == name and attrs["wall_time"] >= 0
        assert attrs["dynamics"] == "design"
    _, attrs = io.read_group(path, "analysis/lifetimes/table_error")
    assert attrs["tasks"] == ["masked", "denoise"]


def test_inputs_are_the_configs_data(analyzed):
    path, _ = analyzed
    inputs = load_run_inputs(path, SMALL["n_test"])
    config = TINY.with_overrides({"data.n_test": SMALL["n_test"]})
    images = load_images(config)
    np.testing.assert_array_equal(inputs.test_images, images.test)
    np.testing.assert_array_equal(inputs.train_images, images.train)
    np.testing.assert_array_equal(inputs.J, io.read_array(path, "J"))
    emb = config.make_embedding()
    np.testing.assert_array_equal(inputs.patterns, emb.encode(images.train))
    # the corruptions are the run's own task inputs (its tasks.seed), image by image
    x0, mask = inputs.starts("masked")
    x_ref, m_ref = task_inputs("masked", images.test, emb, index=images.test_index, seed=0)
    np.testing.assert_array_equal(x0, x_ref)
    np.testing.assert_array_equal(mask, m_ref)
    noisy, none = inputs.starts("denoise")
    ref, _ = task_inputs("denoise", images.test, emb, index=images.test_index, seed=0)
    assert none is None
    np.testing.assert_array_equal(noisy, ref)


@pytest.mark.parametrize("task", ["masked", "denoise"])
def test_analyze_and_evaluate_see_identical_task_inputs(analyzed, tmp_path, task):
    # spinsa evaluate and spinsa analyze of one run file: the same corrupted images, so the
    # same errors at every t (the analysis keeps them for the fitted J in hebbian/errors_*)
    path, _ = analyzed
    out = evaluate(path, task, SMALL["steps"], n_test=SMALL["n_test"], out=tmp_path / "e.h5")
    evaluated = io.read_array(out, f"evaluation/{task}/errors/all")
    analysed = load_analysis(path, f"hebbian/errors_{task}")
    assert analysed.models[0] == "fitted"
    np.testing.assert_allclose(analysed.errors[0], evaluated, rtol=1e-5, atol=1e-8)


# --------------------------------------------------------------------------- same numbers


def test_overlaps_equal_the_in_memory_analysis(analyzed):
    path, _ = analyzed
    inputs = load_run_inputs(path, SMALL["n_test"])
    T = SMALL["steps"]
    traj = full_trajectory(inputs, inputs.J, inputs.test_patterns, T)
    expected = trajectory_overlaps(
        traj.states, traj.times, targets=inputs.test_patterns, patterns=inputs.patterns
    )
    same(expected, load_analysis(path, "overlaps/test"))
    mean = np.broadcast_to(mean_pattern(inputs.patterns), inputs.test_patterns.shape)
    got = load_analysis(path, "overlaps/mean")
    np.testing.assert_allclose(got.target, target_overlaps(traj.states, mean), rtol=1e-5)

    _, attrs = io.read_group(path, "analysis/overlaps/train")
    index = np.asarray(attrs["start_index"])
    M = inputs.patterns.shape[0]
    rng = np.random.default_rng([SMALL["seed"], 0])
    np.testing.assert_array_equal(index, np.sort(rng.choice(M, SMALL["n_test"] // 2, False)))
    starts = inputs.patterns[index]
    traj = full_trajectory(inputs, inputs.J, starts, T)
    patterns = inputs.patterns
    expected = trajectory_overlaps(traj.states, traj.times, targets=starts, patterns=patterns)
    same(expected, load_analysis(path, "overlaps/train"))
    # a stored pattern is its own nearest pattern at t = 0, with overlap 1
    got = load_analysis(path, "overlaps/train")
    np.testing.assert_array_equal(got.nearest_index[0], index)
    np.testing.assert_allclose(got.nearest_overlap[0], 1.0, rtol=1e-5)


def test_lifetimes_equal_the_in_memory_analysis(analyzed):
    path, _ = analyzed
    inputs = load_run_inputs(path, SMALL["n_test"])
    T = SMALL["steps"]
    # the global attractor: the largest basin of the attractor search
    report = load_analysis(path, "attractors/report")
    assert report.n_attractors > 0
    a = int(np.argmax(report.basin_size))
    to_overlap = target_overlaps(
        np.broadcast_to(report.states[a], inputs.test_patterns.shape), inputs.test_patterns
    )
    image = inputs.embedding.decode_pixels(report.states[a : a + 1])[0]
    clean = inputs.embedding.pixel_space(inputs.test_images)
    to_error = reconstruction_errors(np.broadcast_to(image, clean.shape), clean).all
    per = {"error": [], "overlap": []}
    for task in ("masked", "denoise"):
        x0, mask = inputs.starts(task)
        traj = full_trajectory(inputs, inputs.J, x0, T)
        _, errors = decoded_errors(inputs, traj.states, mask)
        err = error_lifetimes(errors.all, traj.times, attractor=to_error)
        m = target_overlaps(traj.states, inputs.test_patterns)
        ovl = overlap_lifetimes(m, traj.times, 0.9, attractor=to_overlap)  # the settings'
        _, attrs = io.read_group(path, f"analysis/lifetimes/{task}_overlap")
        assert attrs["attractor"] == a
        same(err, load_analysis(path, f"lifetimes/{task}_error"))
        same(ovl, load_analysis(path, f"lifetimes/{task}_overlap"))
        per["error"].append(err)
        per["overlap"].append(ovl)
    for criterion, results in per.items():
        same(
            summarize_lifetimes(results, [0.3, 0.7]),
            load_analysis(path, f"lifetimes/table_{criterion}"),
        )


def test_attractors_equal_the_in_memory_analysis(analyzed):
    path, _ = analyzed
    inputs = load_run_inputs(path, SMALL["n_test"])
    seed, n = SMALL["seed"], SMALL["n_attractor_starts"]
    N, d = inputs.J.shape[0], inputs.J.shape[2]
    x0s = np.concatenate(
        [
            inputs.test_patterns[:n],
            inputs.starts("masked")[0][:n],
            inputs.starts("denoise")[0][:n],
            random_spins(n, N, d, np.random.default_rng([seed, 3])),
        ]
    )
    groups = ["test"] * n + ["masked"] * n + ["noisy"] * n + ["random"] * n
    expected = find_attractors(
        inputs.J,
        1.0,
        x0s,
        until_converged=True,  # each start until converged, at most attractor_steps
        max_steps=SMALL["attractor_steps"],
        tol=AnalysisSettings().tol,
        patterns=inputs.patterns,
        embedding=inputs.embedding,
        groups=groups,
    )
    got = load_analysis(path, "attractors/report")
    same(expected, got)
    # issue 43, item 22: not a fixed number of steps (150, "a guess"), the converged rule
    assert got.until_converged and got.steps == SMALL["attractor_steps"]
    assert got.steps_run.max() < SMALL["attractor_steps"]  # every start converged
    images = load_analysis(path, "attractors/images").images
    assert images.shape == (got.n_attractors, *TINY.data.image_shape)
    if got.n_attractors:
        np.testing.assert_allclose(images, inputs.embedding.decode(got.states), atol=1e-6)


def test_hebbian_equals_the_in_memory_analysis(analyzed):
    path, _ = analyzed
    inputs = load_run_inputs(path, SMALL["n_test"])
    positions = inputs.embedding.token_positions("center")
    expected = compare_with_hebbian(inputs.J, inputs.patterns, positions=positions)
    same(expected, load_analysis(path, "hebbian/comparison"))
    K = matched_hebbian(inputs.patterns, inputs.J)
    same(strength_vs_distance(inputs.J, positions), load_analysis(path, "hebbian/distance"))
    same(strength_vs_distance(K, positions), load_analysis(path, "hebbian/distance_hebbian"))
    same(coupling_spectrum(inputs.J), load_analysis(path, "hebbian/spectrum"))
    same(coupling_spectrum(K), load_analysis(path, "hebbian/spectrum_hebbian"))
    same(strength_maps(K, inputs.embedding.grid_shape), load_analysis(path, "hebbian/maps_hebbian"))
    T = SMALL["steps"]
    for task in ("masked", "denoise"):
        x0, mask = inputs.starts(task)
        curves = load_analysis(path, f"hebbian/errors_{task}")
        assert curves.models == ("fitted", "hebbian") and curves.task == task
        for m, J in enumerate((inputs.J, K)):
            _, errors = decoded_errors(inputs, full_trajectory(inputs, J, x0, T).states, mask)
            s = summarize(errors)
            np.testing.assert_allclose(curves.errors[m], errors.all, rtol=1e-6)
            # atol: the visible pixels' error at t = 0 is float rounding (about 1e-16)
            for part in ("all", "masked", "visible"):
                np.testing.assert_allclose(
                    getattr(curves, f"mean_{part}")[m], getattr(s.mean, part), rtol=1e-6,
                    atol=1e-12,
                )  # fmt: skip
                np.testing.assert_allclose(
                    getattr(curves, f"sem_{part}")[m], getattr(s.sem, part), rtol=1e-6,
                    atol=1e-12,
                )  # fmt: skip


def test_patches_equal_the_in_memory_analysis(analyzed):
    path, _ = analyzed
    inputs = load_run_inputs(path, SMALL["n_test"])
    T = SMALL["steps"]
    x0, mask = inputs.starts("masked")
    traj = full_trajectory(inputs, inputs.J, x0, T)
    decoded, errors = decoded_errors(inputs, traj.states, mask)
    mean = summarize(errors).mean.all
    best = 1 + int(np.argmin(mean[1:]))
    clean = inputs.embedding.decode(inputs.embedding.encode(inputs.test_images))
    expected = {
        "clean": masked_patch_variances(clean, mask, 2),
        "first": masked_patch_variances(decoded[1], mask, 2),
        "best": masked_patch_variances(decoded[best], mask, 2),
        "last": masked_patch_variances(decoded[T], mask, 2),
    }
    for name, result in expected.items():
        same(result, load_analysis(path, f"patches/{name}"))
    hist = load_analysis(path, "patches/histograms")
    same(patch_variance_histograms(dict(zip(hist.models, expected.values())), bins=50), hist)
    assert io.read_group(path, "analysis/patches/histograms")[1]["best_t"] == best


def test_strength_maps_match_a_loop(rng):
    gh, gw, d = 3, 4, 2
    N = gh * gw
    J = rng.standard_normal((N, N, d, d))
    for i in range(N):
        J[i, i] = 0
    maps = strength_maps(J, (gh, gw))
    S = np.sqrt((J**2).sum(axis=(2, 3)))
    c = (gh // 2) * gw + gw // 2
    assert maps.center_token == c
    np.testing.assert_allclose(maps.center.ravel(), S[c])
    sums, counts = {}, {}
    for i in range(N):
        for j in range(N):
            if i != j:
                key = (j // gw - i // gw, j % gw - i % gw)
                sums[key] = sums.get(key, 0.0) + S[i, j]
                counts[key] = counts.get(key, 0) + 1
    assert np.isnan(maps.offset[gh - 1, gw - 1])
    for (dr, dc), total in sums.items():
        assert maps.offset[dr + gh - 1, dc + gw - 1] == pytest.approx(total / counts[dr, dc])
    with pytest.raises(ValueError, match="grid_shape"):
        strength_maps(J, (5, 5))


def test_notebook_dynamics_are_followed(tmp_path):
    from spinsa.damico import damico_run

    path = tmp_path / "damico.h5"
    train(TINY.with_overrides({"dynamics.preset": "damico2024"}), path)
    analyze_run(path, only=["overlaps"], n_test=6, steps=4)
    inputs = load_run_inputs(path, 6)
    m = [target_overlaps(inputs.test_patterns, inputs.test_patterns)]
    damico_run(
        inputs.test_patterns,
        inputs.J,
        1.0,
        4,
        callback=lambda t, x: m.append(target_overlaps(x, inputs.test_patterns)),
    )
    got = load_analysis(path, "overlaps/test")
    np.testing.assert_allclose(got.target, np.stack(m), rtol=1e-5)
    assert io.read_group(path, "analysis/overlaps")[1]["dynamics"] == "damico2024"


# --------------------------------------------------------------------------- refusals


def test_existing_analyses_are_kept_unless_overwrite(analyzed, tmp_path):
    path = tmp_path / "copy.h5"
    shutil.copy(analyzed[0], path)
    before = load_analysis(path, "overlaps/test")
    with pytest.raises(FileExistsError, match="overlaps"):
        analyze_run(path, only="overlaps", **SMALL)
    written = analyze_run(path, only="overlaps", overwrite=True, **{**SMALL, "steps": 3})
    assert written == ["overlaps/test", "overlaps/mean", "overlaps/train"]
    after = load_analysis(path, "overlaps/test")
    assert after.times.shape == (4,) and before.times.shape == (9,)
    assert "patches/histograms" in list_analyses(path)


def test_bad_names_and_settings(fresh):
    with pytest.raises(ValueError, match="overlaps, lifetimes, attractors, hebbian, patches"):
        analyze_run(fresh, only=["overlaps", "nope"])
    with pytest.raises(ValueError, match="no analysis"):
        analyze_run(fresh, only=[])
    with pytest.raises(ValueError, match="attractor_steps"):
        analyze_run(fresh, attractor_step=10)
    with pytest.raises(ValueError, match="n_test"):
        analyze_run(fresh, n_test=1)
    with pytest.raises(ValueError, match="steps"):
        AnalysisSettings(steps=0)
    assert list_analyses(fresh) == []


def test_foreign_and_other_files_are_refused(tmp_path):
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["J"] = np.zeros((2, 2, 1, 1))
    with pytest.raises(io.SpinsaFileError, match="not a spinsa file"):
        analyze_run(foreign)
    with pytest.raises(io.SpinsaFileError, match="not a spinsa file"):
        plot_run(foreign, tmp_path / "figs")
    other = tmp_path / "fit.h5"
    io.write_file(other, {"J": np.zeros((2, 2, 1, 1))}, kind="fit")
    with pytest.raises(ValueError, match="run file"):
        analyze_run(other)
    with pytest.raises(ValueError, match="kind 'fit'.*spinsa train CONFIG.toml"):
        plot_run(other, tmp_path / "figs")  # names a command that accepts it (issue 29)


# --------------------------------------------------------------------------- figures, CLI


def test_figures_of_the_analyses_draw_every_panel_and_say_what_they_show(analyzed):
    from spinsa.plotting import figure_hebbian, figure_lifetimes, figure_overlaps

    path, _ = analyzed
    # issue 43, item 19: eight panels, none left empty
    fig = figure_hebbian(path)
    assert len([ax for ax in fig.axes if ax.get_title()]) == 8
    assert not any("no maps" in t.get_text() for ax in fig.axes for t in ax.texts)
    assert not fig.texts[1:]  # the title alone: no caption of what is left out
    # issue 43, item 18: each curve says what its group holds
    ax1, ax2 = figure_overlaps(path).axes[:2]
    n_test, n_train = SMALL["n_test"], SMALL["n_test"] // 2
    assert ax1.get_legend_handles_labels()[1] == [
        f"from test images ({n_test})",
        f"from training images ({n_train})",
    ]
    near = ax2.get_legend_handles_labels()[1]
    assert f"from training images ({n_train}): nearest pattern" in near
    assert f"from test images ({n_test}): mean training pattern" in " ".join(near)
    assert ax1.get_title() == "overlap with the start image"
    # issue 43, item 17: the lifetimes say whether the attractor passes the threshold
    fig = figure_lifetimes(path)
    tables = [load_analysis(path, f"lifetimes/table_{c}") for c in ("error", "overlap")]
    assert all(t.fraction_attractor_passes is not None for t in tables)
    assert "midway to the attractor" in fig.axes[1].get_title()
    passes = any(t.fraction_attractor_passes.max() > 0 for t in tables)
    assert any("passes the threshold" in t.get_text() for t in fig.texts) == passes


def test_plot_run_writes_every_figure(analyzed, tmp_path):
    path, _ = analyzed
    paths = plot_run(path, tmp_path / "figs")
    names = sorted(p.name for p in paths)
    assert names == sorted(
        f"{n}.png"
        for n in ("overlaps", "lifetimes", "attractors", "hebbian", "hebbian_errors", "patches")
    )
    for p in paths:
        head = p.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_hebbian_figure_without_spectra(analyzed, tmp_path):
    # a comparison made with spectra=False (its spectra None) still draws, saying so
    from spinsa.analysis import save_analysis
    from spinsa.plotting.analysis import figure_hebbian

    path = tmp_path / "run.h5"
    shutil.copy(analyzed[0], path)
    inputs = load_run_inputs(path, SMALL["n_test"])
    bare = compare_with_hebbian(inputs.J, inputs.patterns, spectra=False)
    assert bare.singular_values is None
    save_analysis(path, "hebbian/comparison", bare, overwrite=True)
    fig = figure_hebbian(path)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert "spectra" not in titles and len(titles) == 7  # the panel is left out,
    assert "the spectra (compared with spectra=False)" in fig.texts[-1].get_text()  # and said


def test_cli_unknown_only_lists_the_analyses(fresh, capsys):
    from spinsa.cli import main

    assert main(["analyze", str(fresh), "--only", "nope", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "unknown analysis 'nope'" in err
    for name in ANALYSES:
        assert name in err


def test_cli_analyze_then_plot(fresh, tmp_path, capsys):
    from spinsa.cli import main

    args = ["analyze", str(fresh), "--only", "patches", "lifetimes"]
    assert main([*args, "--n-test", "6", "--steps", "3", "--no-progress"]) == 0
    assert "wrote 11 results" in capsys.readouterr().out
    assert main([*args, "--no-progress"]) == 4  # already there: a file error
    out = tmp_path / "figs"
    assert main(["plot", str(fresh), "--out", str(out), "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["lifetimes.png", "patches.png"]
    assert "2 figures" in capsys.readouterr().out


def test_stored_results_load_in_a_fresh_interpreter(analyzed):
    # every result type is registered by spinsa.analysis itself: reading a run file's
    # analyses needs no import of spinsa.experiments
    path, _ = analyzed
    code = (
        "import sys; from spinsa.analysis import list_analyses, load_analysis; "
        f"[load_analysis({str(path)!r}, n) for n in list_analyses({str(path)!r})]; "
        "assert 'spinsa.experiments' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
