"""``spinsa compare``: two tiny run files end to end, and every refusal of bad input."""

import types
from pathlib import Path

import numpy as np
import pytest
from tiny_configs import PNG, SHARED

import spinsa
from spinsa import io
from spinsa.analysis import coupling_cosine, list_analyses, load_analysis
from spinsa.analysis.summary import read_summaries
from spinsa.cli import EXIT_CODES, main
from spinsa.experiments import ExperimentConfig, run_experiment, train
from spinsa.experiments.compare import _labels, compare_runs
from spinsa.io.results import COMPARE_KIND


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs on the same data, fitted at different λ_train, and a run on other data."""
    root = tmp_path_factory.mktemp("runs")
    alpha = ExperimentConfig.from_toml('name = "alpha"\n' + SHARED)
    beta = alpha.with_overrides({"name": "beta", "fit.lam": 2.0})
    other = alpha.with_overrides({"name": "other", "data.seed": 7})
    return types.SimpleNamespace(
        a=run_experiment(alpha, root / "a.h5"),
        b=run_experiment(beta, root / "b.h5"),
        other=train(other, root / "other.h5"),  # no evaluation: refused before it matters
        root=root,
    )


@pytest.fixture(scope="module")
def compared(runs):
    """``spinsa compare a.h5 b.h5 -o out`` through the command line."""
    out = runs.root / "out"
    argv = ["compare", str(runs.a), str(runs.b), "-o", str(out), "--n-data", "30"]
    assert main([*argv, "--no-progress"]) == 0
    return out


def test_the_file_holds_every_comparison(runs, compared):
    h5 = compared / "compare.h5"
    info = io.read(h5)
    assert info.kind == COMPARE_KIND
    assert info.attrs["models"] == ["alpha", "beta"]
    assert set(list_analyses(h5)) == {
        "cosines",
        "spectra",
        "distance",
        "entropy/test",
        "entropy/train",
        "pseudolikelihood/train",
        "pseudolikelihood/test",
        "tasks/masked",
        "tasks/denoise",
    }
    Ja, Jb = io.read_array(runs.a, "J"), io.read_array(runs.b, "J")
    cos = load_analysis(h5, "cosines")
    assert cos.cosine[0, 1] == pytest.approx(coupling_cosine(Ja, Jb))
    assert cos.names == ("alpha", "beta")
    spectra = load_analysis(h5, "spectra")
    assert spectra.norm[1] == pytest.approx(np.linalg.norm(Jb.astype(np.float64)), rel=1e-6)
    pl = load_analysis(h5, "pseudolikelihood/train")
    assert pl.n_patterns == 30 and pl.lam == 5.0  # the first run's λ_train, with a note
    assert any("λ_train" in note for note in info.attrs["notes"])
    entropy = load_analysis(h5, "entropy/test")
    assert entropy.max_entropy == pytest.approx(np.log(35))  # 36 tokens
    assert np.all(entropy.mean <= entropy.max_entropy + 1e-9)


def test_the_task_tables_are_the_run_files_summaries(runs, compared):
    for task in ("masked", "denoise"):
        r = load_analysis(compared / "compare.h5", f"tasks/{task}")
        for k, path in enumerate((runs.a, runs.b)):
            s = read_summaries(path, tasks=(task,))[task]
            assert r.best_t[k] == s["best_t"]
            assert r.best_error[k] == pytest.approx(s["best_error"])
            assert r.best_reference[k] == s["best_reference"]
            assert r.z[k] == pytest.approx(s["references"][s["best_reference"]]["z"])
            assert bool(r.beats[k]) == s["transient_memory"]
        assert np.isfinite(r.paired_z[0, 1])  # same data, same corruptions: paired


def test_the_report_and_the_figures(compared):
    report = (compared / "report.md").read_text()
    for heading in (
        "Similarity of the couplings",
        "Spectra",
        "Strength against distance",
        "Attention entropy",
        "Pseudo-likelihood",
        "masked prediction",
        "denoising",
    ):
        assert f"## {heading}" in report or f"### {heading}" in report, heading
    assert "| `fit.lam` | 5.0 | 2.0 |" in report
    assert "standard errors" in report and "alpha" in report and "beta" in report
    figures = sorted(p.name for p in compared.glob("*.png"))
    assert figures == sorted(
        f"{n}.png"
        for n in (
            "cosines",
            "spectra",
            "distance",
            "entropy",
            "pseudolikelihood",
            "tasks",
            "final_images",
        )
    )
    for name in figures:
        assert (compared / name).read_bytes().startswith(PNG)
        assert f"({name})" in report


def test_an_existing_comparison_is_kept(runs, compared):
    with pytest.raises(FileExistsError, match="overwrite"):
        compare_runs([runs.a, runs.b], compared)


def test_labels_are_the_run_names_made_unique():
    def info(name, stem):
        return types.SimpleNamespace(attrs={"name": name} if name else {}, path=Path(f"{stem}.h5"))

    infos = [info("design", "a"), info("design", "b"), info(None, "c"), info("design", "d")]
    assert _labels(infos) == ("design", "design-2", "c", "design-3")


def _cli(argv, capsys):
    code = main(["compare", *map(str, argv), "--no-progress"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_bad_input_is_one_line_and_a_status(runs, tmp_path, capsys):
    out = tmp_path / "out"
    code, err = _cli([runs.a, "-o", out], capsys)
    assert code == EXIT_CODES["usage"] and "at least two run files" in err
    code, err = _cli([runs.a, tmp_path / "missing.h5", "-o", out], capsys)
    assert code == EXIT_CODES["file"] and "missing.h5" in err
    (tmp_path / "notes.h5").write_text("not HDF5")
    code, err = _cli([runs.a, tmp_path / "notes.h5", "-o", out], capsys)
    assert code == EXIT_CODES["file"] and "notes.h5" in err
    fit = spinsa.fit_pseudolikelihood(np.ones((2, 4, 2), np.float32) / np.sqrt(2), max_iter=1)
    fit.save(tmp_path / "fit.h5")  # a spinsa file, but not a run file
    code, err = _cli([runs.a, tmp_path / "fit.h5", "-o", out], capsys)
    assert code == EXIT_CODES["usage"] and "expected a run file" in err
    code, err = _cli([runs.a, runs.other, "-o", out], capsys)
    assert code == EXIT_CODES["usage"] and "data.seed" in err and "[data]" in err
    assert not out.exists()  # refused before any work


def test_reproduce_layout_reads_the_evaluations_beside_the_fits(runs, tmp_path):
    """``spinsa reproduce`` writes fit-<model>.h5 and eval-<model>-<task>.h5: compare finds
    the evaluations of a fit file in its siblings."""
    from spinsa.experiments import evaluate

    for name, source in (("alpha", runs.a), ("beta", runs.b)):
        config = ExperimentConfig.from_toml(f'name = "{name}"\n' + SHARED)
        if name == "beta":
            config = config.with_overrides({"fit.lam": 2.0})
        fit = train(config, tmp_path / f"fit-{name}.h5")
        for task in ("masked", "denoise"):
            evaluate(fit, task, out=tmp_path / f"eval-{name}-{task}.h5")
    compare_runs([tmp_path / "fit-alpha.h5", tmp_path / "fit-beta.h5"], tmp_path / "out",
                 n_data=30)  # fmt: skip
    h5 = tmp_path / "out" / "compare.h5"
    assert {"tasks/masked", "tasks/denoise"} <= set(list_analyses(h5))
    in_file = load_analysis(runs.root / "out" / "compare.h5", "tasks/masked")
    beside = load_analysis(h5, "tasks/masked")
    np.testing.assert_allclose(beside.best_error, in_file.best_error)
