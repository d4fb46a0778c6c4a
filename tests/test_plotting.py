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
