"""Figures read HDF5 files only; they draw what the file holds."""

import subprocess
import sys

import numpy as np
import pytest

from spinsa import io, plotting
from spinsa.references import REFERENCES


def test_error_figure_draws_the_stored_curves(run_file):
    fig = plotting.figure_errors(run_file)
    axes = fig.get_axes()
    assert len(axes) == 2
    masked_line = axes[0].get_lines()[0]
    mean = io.read_array(run_file, "evaluation/masked/mean/all")
    np.testing.assert_array_equal(masked_line.get_xdata(), [1, 2, 3, 4])  # from t = 1
    np.testing.assert_allclose(masked_line.get_ydata(), mean[1:])
    denoise_line = axes[1].get_lines()[0]
    np.testing.assert_array_equal(denoise_line.get_xdata(), [0, 1, 2, 3, 4])
    assert "masked prediction" in axes[0].get_title()
    assert len(axes[0].collections) == 1  # the standard-error band
    # the references: one level per stored reference, at its mean over the test images
    for ax, task in zip(axes, ("masked", "denoise"), strict=True):
        levels = {
            line.get_label().rsplit(" (", 1)[0]: line.get_ydata()[0] for line in ax.get_lines()[2:]
        }
        for name, label in REFERENCES[task].items():
            errs = io.read_array(run_file, f"evaluation/{task}/references/{name}/all")
            assert levels[label] == pytest.approx(errs.astype(np.float64).mean(), rel=1e-6)


def test_notebook_view_is_one_minus_the_stored_errors(run_file):
    fig = plotting.figure_notebook_view(run_file)
    lines = fig.get_axes()[0].get_lines()
    for line, part in zip(lines[:3], ("all", "masked", "visible"), strict=True):
        mean = io.read_array(run_file, f"evaluation/masked/mean/{part}")
        np.testing.assert_array_equal(line.get_xdata(), [0, 1, 2, 3])  # q = t - 1
        np.testing.assert_allclose(line.get_ydata(), 1 - mean[1:])


def test_error_figure_other_pixels_and_bad_choice(run_file):
    fig = plotting.figure_errors(run_file, pixels="masked", tasks=("masked",))
    mean = io.read_array(run_file, "evaluation/masked/mean/masked")
    np.testing.assert_allclose(fig.get_axes()[0].get_lines()[0].get_ydata(), mean[1:])
    with pytest.raises(ValueError, match="pixels"):
        plotting.figure_errors(run_file, pixels="some")


def test_examples_figure_grid(run_file):
    fig = plotting.figure_examples(run_file, n_examples=2)
    times = io.read_array(run_file, "evaluation/masked/examples/times")
    assert len(fig.get_axes()) == 2 * 2 * (1 + times.size)  # 2 tasks x 2 rows x columns
    first = fig.get_axes()[0].get_images()[0].get_array()
    np.testing.assert_allclose(
        first, io.read_array(run_file, "evaluation/masked/examples/clean")[0]
    )


def test_save_figure_writes_atomically(run_file, tmp_path):
    path = plotting.save_figure(plotting.figure_errors(run_file), tmp_path / "f.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    plotting.save_figure(plotting.figure_errors(run_file), tmp_path / "f.pdf")
    assert (tmp_path / "f.pdf").read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]


def test_file_without_evaluations_is_explained(tmp_path):
    path = io.write_file(
        tmp_path / "x.h5", {"J": np.zeros((2, 2, 1, 1))}, {"name": "m"}, kind="experiment"
    )
    with pytest.raises(ValueError, match="no evaluation"):
        plotting.figure_errors(path)


def test_imports_stay_light():
    code = (
        "import sys, spinsa, spinsa.experiments, spinsa.plotting, spinsa.cli; "
        "heavy = [m for m in ('matplotlib', 'torch') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------- a user's analysis results
def _user_file(path, rng, **results):
    """A file as a user writes it: couplings, and results saved under names of their own."""
    from spinsa import analysis

    io.write_file(path, {"J": rng.standard_normal((6, 6, 3, 3))}, kind="run")
    for name, result in results.items():
        analysis.save_analysis(path, name, result)
    return path


def _texts(fig) -> str:
    """The figure's own texts (title, caption), on one line."""
    return " ".join(t.get_text() for t in fig.texts).replace("\n", " ")


def _trajectories(rng, P=3, N=6, d=3, steps=5):
    import spinsa
    from spinsa.analysis import random_spins

    xi = random_spins(4, N, d, rng=rng)
    x0 = random_spins(P, N, d, rng=rng)
    return xi, x0, spinsa.run(x0, spinsa.hebbian_couplings(xi), 1.0, steps)


def test_overlap_figure_of_a_users_test_train_and_mean(tmp_path, rng):
    # issue 43, item 18: groups named like spinsa analyze's, but what the user put in them:
    # an AxisError before (no .target in "mean"), and "training images" for the overlaps
    # of the test runs with the training patterns
    from spinsa.analysis import mean_pattern, trajectory_overlaps

    xi, x0, traj = _trajectories(rng)
    path = _user_file(
        tmp_path / "mine.h5",
        rng,
        **{
            "overlaps/test": trajectory_overlaps(traj.states, traj.times, targets=x0),
            "overlaps/train": trajectory_overlaps(traj.states, traj.times, patterns=xi),
            "overlaps/mean": trajectory_overlaps(
                traj.states, traj.times, patterns=mean_pattern(xi)[None]
            ),
        },
    )
    fig = plotting.figure_overlaps(path)
    left, right = (ax.get_legend_handles_labels()[1] for ax in fig.axes[:2])
    assert left == ["analysis/overlaps/test (3)"]
    assert right == [
        "analysis/overlaps/mean (3): nearest pattern",
        "analysis/overlaps/train (3): nearest pattern",
    ]
    assert not any("training images" in label for label in left + right)
    assert fig.axes[0].get_title() == "overlap with each trajectory's target"
    fig.canvas.draw()
    # a panel no trace has data for says what would fill it
    solo = trajectory_overlaps(traj.states, traj.times, patterns=xi)
    path = _user_file(tmp_path / "solo.h5", rng, solo=solo)
    texts = [t.get_text() for t in plotting.figure_overlaps(path).axes[0].texts]
    assert texts == ["no trace holds overlaps with its targets\n"
                     "(trajectory_overlaps(..., targets=...))"]  # fmt: skip


def test_hebbian_figure_draws_only_the_panels_it_has(tmp_path, rng):
    # issue 43, item 19: 4 of 8 panels said "no maps beside the comparison" unless the user
    # saved companions under names only a docstring gave
    from spinsa.analysis import compare_with_hebbian, random_spins, strength_maps

    xi = random_spins(4, 6, 3, rng=rng)
    J = rng.standard_normal((6, 6, 3, 3))
    path = _user_file(tmp_path / "mine.h5", rng, cmp=compare_with_hebbian(J, xi))
    fig = plotting.figure_hebbian(path)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 3 and "spectra" in titles  # elements, pair cosines, spectra
    assert not [t for ax in fig.axes for t in ax.texts]  # no panel that says it is empty
    caption = _texts(fig)
    assert "the fitted strength maps (spinsa.analysis.strength_maps)" in caption
    assert "spinsa.analysis.strength_vs_distance" in caption
    fig.canvas.draw()
    # maps saved beside it: their panels appear, with nothing said of them
    from spinsa import analysis

    analysis.save_analysis(path, "maps", strength_maps(J, (2, 3)))
    fig = plotting.figure_hebbian(path)
    assert len([ax for ax in fig.axes if ax.get_title()]) == 5
    assert "fitted strength maps" not in _texts(fig)


def test_lifetime_figure_warns_where_the_attractor_passes_the_threshold(tmp_path, rng):
    # issue 43, item 17: the figure reported the attractor's persistence as memories'
    from spinsa.analysis import overlap_lifetimes, summarize_lifetimes

    m = np.r_[np.ones(3), np.full(5, 0.95)][:, None] * np.ones((1, 4))
    times = np.arange(8)
    life = overlap_lifetimes(m, times, 0.9, attractor=[0.95, 0.95, 0.5, 0.5])
    assert life.lifetime.tolist() == [3, 3, 7, 7]  # censored where the attractor is far
    path = _user_file(tmp_path / "mine.h5", rng, table=summarize_lifetimes([life], [0.3]))
    caption = _texts(plotting.figure_lifetimes(path))
    assert "The attractor itself passes the threshold for some images (level 0.3: 50%)" in caption
    blind = summarize_lifetimes([overlap_lifetimes(m, times, 0.9)], [0.3])
    path = _user_file(tmp_path / "blind.h5", rng, table=blind)
    caption = _texts(plotting.figure_lifetimes(path))
    assert "Measured without the attractor (overlap_lifetimes(..., attractor=...))" in caption
