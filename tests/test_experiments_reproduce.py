"""``reproduce`` and the ``train`` / ``evaluate`` / ``reproduce`` commands, on a tiny
synthetic configuration (seconds): outputs, refusal of a finished run, resume after a kill."""

import subprocess
import sys

import numpy as np
import pytest
from damage import flip_byte, kill_when
from tiny_configs import ONE_MODEL, PNG, SHARED

from spinsa import io
from spinsa.analysis.summary import read_summaries
from spinsa.cli import main
from spinsa.experiments import FinishedRunError, ReproduceConfig, model_names, pipeline, reproduce
from spinsa.report import assess_claims

TWO_MODELS = (
    SHARED
    + """
[models.design]
[models.damico2024]
embedding = { scale = "damico2024" }
fit = { preset = "damico2024", epochs = 1, batch_size = 64, device = "cpu" }
dynamics = { preset = "damico2024" }
"""
)


@pytest.fixture
def fast_figures(monkeypatch):
    """Blank figures: the tests that are about stages, not drawing, skip the drawing time."""
    from spinsa import plotting

    def blank(*args, **kwargs):
        return plotting.new_figure((1, 1))

    monkeypatch.setattr(plotting, "figure_errors", blank)
    monkeypatch.setattr(plotting, "figure_examples", blank)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("repro")
    result = reproduce(out, config=ReproduceConfig.from_toml(TWO_MODELS), progress=False, log=None)
    return out, result


def test_reproduce_writes_hdf5_figures_and_report(finished):
    out, result = finished
    assert result.h5 == out / "reproduce.h5" and result.report == out / "report.md"
    info = io.read(result.h5)
    assert info.kind == "reproduce"
    assert model_names(result.h5) == ["design", "damico2024"]
    for model in ("design", "damico2024"):
        assert info.datasets[f"models/{model}/J"][0] == (36, 36, 8, 8)
        for task in ("masked", "denoise"):
            shape = info.datasets[f"models/{model}/evaluation/{task}/errors/all"][0]
            assert shape == (5, 20)
    # errors, two example grids, the notebook's view of damico2024, patch variances
    assert [f.name for f in result.figures] == [
        "fig1_errors.png",
        "fig1_examples_design.png",
        "fig1_examples_damico2024.png",
        "fig1_notebook_damico2024.png",
        "fig2_patch_variances.png",
        "baselines_validation.png",
    ]
    for fig in result.figures:
        assert fig.read_bytes()[:8] == PNG
    report = result.report.read_text()
    for text in (
        "## The numbers",
        "## The paper's claims",
        "design",
        "damico2024",
        "best t",
        "fig1_errors.png",
        "mean training digit",
        "## Against simple references",
        "mean training image in the hole",
        "Transient memory",
        "## The published notebook, side by side (damico2024)",
        "not a test",  # synthetic data: the published numbers do not apply
    ):
        assert text in report
    verdicts = ("**holds**", "**partly**", "**does not hold**", "— no verdict**")
    assert any(v in report for v in verdicts)
    # the notebook's measurements: the epoch means of the minibatch losses; 256 test images
    nb = io.read_array(result.h5, "models/damico2024/notebook/train_loss")
    steps = io.read_array(result.h5, "models/damico2024/fit/history/step_loss")
    np.testing.assert_allclose(nb, [steps.mean()], rtol=1e-12)  # one epoch
    assert io.read_array(result.h5, "models/damico2024/notebook/masked_score").shape == (256,)


def test_references_and_verdicts_in_the_report(finished):
    from spinsa.report import assess_references, unconverged_fits

    out, result = finished
    models = ("design", "damico2024")
    summaries = {m: read_summaries(result.h5, m) for m in models}
    report = result.report.read_text()
    attrs = {m: io.read_group(result.h5, f"models/{m}")[1] for m in models}
    unconverged = unconverged_fits(attrs)
    for model, task, verdict, _ in assess_references(summaries):
        s = summaries[model][task]
        assert verdict == ("holds" if s["transient_memory"] else "does not hold")
        shown = unconverged.get(model, verdict)  # no verdict from an unconverged fit
        assert f"| {model} | {task} | **{shown}** |" in report
        best = s["references"][s["best_reference"]]
        assert f"{best['error']:.4f} ± {best['sem']:.4f}" in report
    # the tiny fits stop on their caps: the report says so and draws no verdict from them
    a = attrs["design"]
    assert a["fit_converged"] is False and "L-BFGS-B" in a["fit_criterion"]
    n = a["fit_iterations"]
    assert unconverged["design"] == f"not converged after {n} iterations — no verdict"
    assert f"**not converged after {n} iterations — no verdict (criterion: " in report
    for claim in ("masked: lowest", "denoising: falls"):
        assert f"| {claim}" in report
    assert "| design | **not converged after" in report


def test_the_plan_with_estimates_comes_first(tmp_path, fast_figures):
    lines = []
    reproduce(tmp_path, config=ReproduceConfig.from_toml(ONE_MODEL), progress=False,
              log=lines.append, baselines=False)  # fmt: skip
    assert "estimated times" in lines[0]
    assert lines[1].split()[0] == "data" and "~" in lines[1]
    assert any(line.split()[0] == "total" for line in lines[:12])
    assert lines.index(next(x for x in lines if x.startswith("[1/"))) > 5


def test_report_numbers_are_those_of_the_file(finished):
    out, result = finished
    s = read_summaries(result.h5, "design")
    report = result.report.read_text()
    assert f"t = {s['masked']['best_t']}: {s['masked']['best_error']:.4f}" in report
    assert f"{s['denoise']['error_t0']:.4f}" in report


def test_finished_directory_is_refused_unless_overwrite(finished, capsys):
    out, result = finished
    with pytest.raises(FinishedRunError, match="finished run.*overwrite"):
        reproduce(out, config=ReproduceConfig.from_toml(TWO_MODELS), log=None)
    code = main(
        [
            "reproduce",
            "--config",
            str(_write(out.parent / "c2.toml", TWO_MODELS)),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 4  # a file error
    assert "--overwrite" in capsys.readouterr().err


def test_overwrite_starts_afresh(tmp_path, fast_figures):
    cfg = ReproduceConfig.from_toml(ONE_MODEL)
    reproduce(tmp_path, config=cfg, progress=False, log=None)
    before = (tmp_path / "fit-design.h5").stat().st_mtime_ns
    (tmp_path / "notes.txt").write_text("mine")
    reproduce(tmp_path, config=cfg, overwrite=True, progress=False, log=None)
    assert (tmp_path / "fit-design.h5").stat().st_mtime_ns != before
    assert (tmp_path / "notes.txt").read_text() == "mine"  # files not ours are left alone


def test_killed_run_resumes_from_the_finished_intact_stages(tmp_path, monkeypatch, fast_figures):
    cfg = ReproduceConfig.from_toml(ONE_MODEL)
    real_evaluate = pipeline.evaluate

    def killed(run_path, task, *args, **kwargs):
        if task == "denoise":
            raise KeyboardInterrupt  # the run is killed during the second evaluation
        return real_evaluate(run_path, task, *args, **kwargs)

    monkeypatch.setattr(pipeline, "evaluate", killed)
    with pytest.raises(KeyboardInterrupt):
        reproduce(tmp_path, config=cfg, progress=False, log=None)
    assert (tmp_path / "fit-design.h5").is_file()
    assert (tmp_path / "eval-design-masked.h5").is_file()
    assert not (tmp_path / "reproduce.h5").exists() and not (tmp_path / "report.md").exists()
    assert not list(tmp_path.glob(".*tmp*"))  # no half-written file left behind
    flip_byte(tmp_path / "eval-design-masked.h5", "evaluation/masked/mean/masked")  # a bad disk
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("fit-*.h5")}

    monkeypatch.setattr(pipeline, "evaluate", real_evaluate)
    calls = {"train": 0, "evaluate": []}
    real_train = pipeline.train

    def counting_train(*args, **kwargs):
        calls["train"] += 1
        return real_train(*args, **kwargs)

    def counting_evaluate(run_path, task, *args, **kwargs):
        calls["evaluate"].append(task)
        return real_evaluate(run_path, task, *args, **kwargs)

    monkeypatch.setattr(pipeline, "train", counting_train)
    monkeypatch.setattr(pipeline, "evaluate", counting_evaluate)
    lines = []
    result = reproduce(tmp_path, config=cfg, progress=False, log=lines.append)
    assert calls == {"train": 0, "evaluate": ["masked", "denoise"]}  # the damaged one again
    for name, stamp in stamps.items():
        assert (tmp_path / name).stat().st_mtime_ns == stamp, f"{name} was recomputed"
    assert any("fit:design: done earlier, skipped" in line for line in lines)
    assert any(line.startswith("[") and line.endswith(" s") for line in lines)  # stage times
    assert result.report.is_file()


def test_partial_run_of_another_config_is_refused(tmp_path, monkeypatch):
    cfg = ReproduceConfig.from_toml(ONE_MODEL)

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(pipeline, "evaluate", killed)
    with pytest.raises(RuntimeError):
        reproduce(tmp_path, config=cfg, progress=False, log=None)
    monkeypatch.undo()
    other = ReproduceConfig.from_toml(ONE_MODEL.replace("max_iter = 3", "max_iter = 2"))
    with pytest.raises(ValueError, match="another configuration.*fit.max_iter"):
        reproduce(tmp_path, config=other, progress=False, log=None)


def test_unknown_key_in_reproduce_config(tmp_path, capsys):
    path = _write(tmp_path / "bad.toml", ONE_MODEL.replace("max_iter = 3", "max_iters = 3"))
    assert main(["reproduce", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'max_iters'" in err and "max_iter" in err


def test_patch_that_does_not_tile_is_refused(tmp_path, capsys):
    path = _write(tmp_path / "bad.toml", ONE_MODEL.replace("patch = 2", "patch = 5"))
    assert main(["reproduce", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "does not tile" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_quick_and_config_exclude_each_other(tmp_path, capsys):
    path = _write(tmp_path / "c.toml", ONE_MODEL)
    assert main(["reproduce", "--quick", "--config", str(path)]) == 2
    assert "not both" in capsys.readouterr().err


def test_train_and_evaluate_commands(tmp_path, capsys):
    cfg = _write(tmp_path / "exp.toml", SHARED)
    run = tmp_path / "run.h5"
    assert (
        main(
            [
                "train",
                str(cfg),
                "--out",
                str(run),
                "--no-progress",
                "--set",
                "fit.max_iter=2",
                "--name",
                "cli",
            ]
        )
        == 0
    )
    assert "spinsa train: cli" in capsys.readouterr().out
    assert io.read(run).config["fit"]["max_iter"] == 2
    assert main(["evaluate", str(run), "--task", "both", "--steps", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("spinsa evaluate:") == 2 and "best" in out
    assert main(["evaluate", str(run), "--task", "masked", "--no-progress"]) == 4  # it exists
    assert "overwrite" in capsys.readouterr().err
    assert main(["train", str(cfg), "--out", str(run)]) == 4  # exists: a file error
    assert main(["train", str(cfg), "--out", str(tmp_path / "x.h5"), "--patch", "5"]) == 2
    assert "does not tile" in capsys.readouterr().err
    assert main(["train", str(cfg), "--out", str(tmp_path / "x.h5"), "--set", "fit.lamda=2"]) == 2
    assert "unknown key 'lamda'" in capsys.readouterr().err


def test_help_texts():
    for command in ("train", "evaluate", "reproduce"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0


def test_claim_verdicts_follow_the_stated_rules():
    base = dict(
        T=100,
        error_t0=0.03,
        sem_t0=1e-4,
        error_t1=0.02,
        best_error=0.02,
        best_sem=1e-4,
        error_T=0.05,
        sem_T=1e-4,
        corr_T=0.7,
        coherence_T=0.95,
    )
    ok_masked = {**base, "best_t": 1, "rise_z": 200.0, "gain_z": 70.0}
    ok_denoise = {**base, "best_t": 10, "rise_z": 200.0, "gain_z": 70.0}
    verdicts = assess_claims({"m": {"masked": ok_masked, "denoise": ok_denoise}})
    assert [v[2] for v in verdicts] == ["holds", "holds", "holds"]
    late = {**ok_masked, "best_t": 30}
    flat = {**ok_denoise, "rise_z": 0.5, "gain_z": 0.5, "best_t": 50}
    diffuse = {"coherence_T": 0.3, "corr_T": 0.1}
    verdicts = assess_claims({"m": {"masked": {**late, **diffuse}, "denoise": {**flat, **diffuse}}})
    assert [v[2] for v in verdicts] == ["partly", "does not hold", "does not hold"]
    worse_than_input = {**ok_masked, "gain_z": -5.0}  # t = 1 does not beat the masked input
    late_minimum = {**ok_denoise, "best_t": 43}  # more than three times the paper's ten
    verdicts = assess_claims({"m": {"masked": worse_than_input, "denoise": late_minimum}})
    assert [v[2] for v in verdicts[:2]] == ["partly", "partly"]
    assert "not within a factor of three" in verdicts[1][3]


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["mid-write", "between stages"])
def test_kill_9_then_rerun_gives_the_uninterrupted_result(tmp_path, moment):
    """A reproduce run killed with SIGKILL (inside an atomic write, or right after a stage)
    and started again ends with the numbers of a run that was never interrupted."""
    config = tmp_path / "c.toml"
    config.write_text(ONE_MODEL)
    reference = tmp_path / "reference"
    reproduce(reference, config=ReproduceConfig.from_toml(ONE_MODEL), progress=False, log=None,
              baselines=False)  # fmt: skip
    out = tmp_path / "killed"
    argv = ["reproduce", "--config", str(config), "--out", str(out), "--baselines", "none",
            "--no-progress"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "spinsa.cli", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    if moment == "mid-write":  # a temporary file exists: a stage file is being written
        killed = kill_when(proc, lambda: any(out.glob(".eval-*.tmp-*")))
    else:
        killed = kill_when(proc, lambda: (out / "fit-design.h5").exists())
    assert killed, "the run finished before it could be killed"
    assert not (out / "report.md").exists()
    assert main(argv) == 0  # the same command again resumes and finishes
    assert not list(out.glob(".*.tmp-*"))  # the killed writer's leftovers are cleaned up
    for name in ("models/design/J", "models/design/evaluation/masked/errors/all",
                 "models/design/evaluation/denoise/errors/all"):  # fmt: skip
        np.testing.assert_array_equal(
            io.read_array(out / "reproduce.h5", name),
            io.read_array(reference / "reproduce.h5", name),
        )
