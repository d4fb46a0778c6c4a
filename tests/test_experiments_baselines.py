"""The baselines stage of ``spinsa reproduce`` on a tiny synthetic configuration (seconds)."""

import numpy as np
import pytest

pytest.importorskip("torch")

from tiny_configs import ONE_MODEL, PNG  # noqa: E402

from spinsa import io  # noqa: E402
from spinsa._convergence import Convergence, criterion_text  # noqa: E402
from spinsa.analysis.patches import patch_pixels  # noqa: E402
from spinsa.baselines import BaselineConfig, corrupt_images  # noqa: E402
from spinsa.cli import main  # noqa: E402
from spinsa.experiments import ReproduceConfig, pipeline, reproduce  # noqa: E402
from spinsa.experiments.baselines import BaselinesSpec  # noqa: E402
from spinsa.experiments.reproduce import estimate_seconds  # noqa: E402
from spinsa.report import (  # noqa: E402
    BLOCK_BEATS_SA,
    SA_MORE_UNIFORM,
    assess_baseline_claims,
    baseline_report_lines,
    no_verdict,
    read_baseline_summaries,
)
from spinsa.tasks import pixel_mask  # noqa: E402

CONFIG = ONE_MODEL
T = 3


def tiny_spec(patch=2):
    def make(model):
        return BaselineConfig.quick(
            model=model,
            image_shape=(12, 12),
            patch=patch,
            width=8,
            heads=2,
            n_blocks=2,
            epochs=1,
            batch_size=40,
        )

    return BaselinesSpec(make("recycled"), make("vit"), n_train=80, T=T, n_patch_images=10)


@pytest.fixture
def fast_figures(monkeypatch):
    from spinsa import plotting

    def blank(*args, **kwargs):
        return plotting.new_figure((1, 1))

    for name in ("figure_errors", "figure_examples", "figure_patch_variances"):
        monkeypatch.setattr(plotting, name, blank)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("repro-bl")
    cfg = ReproduceConfig.from_toml(CONFIG)
    result = reproduce(out, config=cfg, baselines=tiny_spec(), progress=False, log=None)
    return out, result


def test_stage_writes_baselines_h5(finished):
    out, _ = finished
    path = out / "baselines.h5"
    info = io.read(path)
    assert info.kind == "reproduce-baselines"
    for model in ("recycled", "vit"):
        for task in ("masked", "denoise"):
            g = f"models/{model}/{task}"
            assert info.datasets[f"{g}/mean/all"][0] == (T,)
            assert info.datasets[f"{g}/sem/all"][0] == (T,)
            assert info.datasets[f"{g}/errors/all"][0] == (T, 20)
            assert info.datasets[f"{g}/history/epoch_loss"][0] == (1,)
            assert info.datasets[f"{g}/history/step_loss"][0] == (2,)  # 80 images, batch 40
            errors = io.read_array(path, f"{g}/errors/all").astype(np.float64)
            np.testing.assert_allclose(
                io.read_array(path, f"{g}/mean/all"), errors.mean(axis=1), rtol=1e-5
            )
    vit = io.read_array(path, "models/vit/masked/mean/all")
    np.testing.assert_allclose(vit, vit[0])  # the ViT is constant in t
    models = ["design", "recycled", "vit", "clean"]
    assert info.datasets["patch_variances/counts"][0] == (4, 50)
    for k, m in enumerate(models):
        values = io.read_array(path, f"patch_variances/values/{m}")
        assert values.size > 0 and np.all(values >= 0) and np.all(values <= 0.25 + 1e-9)
        assert io.read_array(path, "patch_variances/median")[k] == pytest.approx(np.median(values))
    s = read_baseline_summaries(path)
    assert s["recycled"]["masked"]["n_parameters"]["total"] > 0
    assert (
        s["vit"]["denoise"]["n_parameters"]["total"]
        > s["recycled"]["denoise"]["n_parameters"]["total"]
    )  # two distinct blocks against one
    assert 1 <= s["recycled"]["masked"]["best_t"] <= T
    assert s["recycled"]["masked"]["n_train"] == 80


def test_clean_variances_follow_the_numpy_formula(finished):
    out, _ = finished
    cfg = ReproduceConfig.from_toml(CONFIG)
    images = pipeline.load_images(cfg.base)
    _, pm = corrupt_images(images.test, "masked", 2, cfg.base.tasks.seed, index=images.test_index)
    img, m = images.test[0].astype(np.float64), pm[0]
    expected = [
        img[r : r + 2, c : c + 2].var() for r in range(0, 12, 2) for c in range(0, 12, 2) if m[r, c]
    ]
    values = io.read_array(out / "baselines.h5", "patch_variances/values/clean")
    np.testing.assert_allclose(values[: len(expected)], expected, rtol=1e-6)


def test_baselines_see_the_bare_sa_masks_and_noise():
    cfg = ReproduceConfig.from_toml(CONFIG)
    exp = cfg.base
    emb = exp.make_embedding()
    test = pipeline.load_images(exp, train=False)
    images, streams = test.test, dict(index=test.test_index)
    _, mask = exp.tasks.inputs("masked", emb, images, test.test_index)
    _, pm = corrupt_images(images, "masked", 2, exp.tasks.seed, **streams)
    np.testing.assert_array_equal(pm, pixel_mask(mask, emb))
    x0, _ = exp.tasks.inputs("denoise", emb, images, test.test_index)
    noisy, _ = corrupt_images(images, "denoise", 2, exp.tasks.seed, **streams)
    np.testing.assert_allclose(emb.encode(noisy), x0, rtol=1e-5, atol=1e-5)
    assert patch_pixels(pm, 2).shape == (20, 36, 4)


def test_figures_and_report_section(finished):
    out, result = finished
    assert (out / "fig2_patch_variances.png").read_bytes()[:8] == PNG
    assert out / "fig2_patch_variances.png" in result.figures
    report = result.report.read_text()
    for text in (
        "## Backprop baselines",
        "recycled block",
        "ViT",
        "the block's error is lowest for t in about 3-7",
        "the ViT is best",
        "the block beats the bare SA given enough iterations",
        "predicted patches are more uniform",
        "fig2_patch_variances.png",
        "median variance",
    ):
        assert text in report
    s = read_baseline_summaries(out / "baselines.h5")
    assert f"{s['vit']['masked']['best_error']:.4f}" in report
    assert f"{s['recycled']['masked']['n_parameters']['total']:,}" in report


def test_rerun_skips_the_finished_stage(finished, fast_figures):
    out, _ = finished
    stamp = (out / "baselines.h5").stat().st_mtime_ns
    (out / "report.md").unlink()
    lines = []
    reproduce(
        out,
        config=ReproduceConfig.from_toml(CONFIG),
        baselines=tiny_spec(),
        progress=False,
        log=lines.append,
    )
    assert any("baselines: done earlier, skipped" in line for line in lines)
    assert (out / "baselines.h5").stat().st_mtime_ns == stamp
    assert "## Backprop baselines" in (out / "report.md").read_text()


def test_other_baseline_recipe_is_refused(finished):
    out, _ = finished
    (out / "report.md").unlink(missing_ok=True)
    other = tiny_spec()
    other = BaselinesSpec(other.recycled.replace(width=4), other.vit, n_train=80, T=T)
    with pytest.raises(ValueError, match="another configuration.*baselines"):
        reproduce(
            out, config=ReproduceConfig.from_toml(CONFIG), baselines=other, progress=False, log=None
        )


def test_no_baselines_skips_the_stage(tmp_path, fast_figures):
    path = tmp_path / "c.toml"
    path.write_text(CONFIG)
    out = tmp_path / "o"
    assert main(["reproduce", "--config", str(path), "--out", str(out), "--no-progress",
                 "--baselines", "none"]) == 0  # fmt: skip
    assert not (out / "baselines.h5").exists()
    assert not list(out.glob("baseline-*.pt"))
    assert not (out / "fig2_patch_variances.png").exists()
    assert "Backprop baselines" not in (out / "report.md").read_text()


def test_spec_validation():
    spec = tiny_spec()
    with pytest.raises(ValueError, match="model"):
        BaselinesSpec(spec.vit, spec.vit)
    with pytest.raises(ValueError, match="n_train"):
        BaselinesSpec(spec.recycled, spec.vit, n_train=0)
    quick = BaselinesSpec.for_run(ReproduceConfig.paper(quick=True), "quick")
    assert quick.recycled.patch == 4 and quick.recycled.device == "cpu"
    full = BaselinesSpec.for_run(ReproduceConfig.paper(quick=False), "paper")
    assert (full.recycled.epochs, full.recycled.batch_size) == (100, 256)
    assert full.vit.device == "auto" and full.n_train is None
    assert BaselinesSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="recipe"):
        BaselinesSpec.for_run(ReproduceConfig.paper(quick=True), "gpu")
    with pytest.raises(ValueError, match="another patch size"):
        BaselinesSpec(spec.recycled, spec.vit, patch_study=spec.recycled)


def test_cpu_recipe_trains_until_the_rule():
    """The CPU recipe: width 64, a constant rate (the rule, not the schedule, ends training),
    a cap well above the epochs the rule needs, two trainings side by side, and the block on
    2x2 patches for the patch-size claim."""
    cpu = BaselinesSpec.for_run(ReproduceConfig.paper(quick=False), "cpu")
    for bc in cpu.configs().values():
        assert (bc.width, bc.schedule, bc.epochs, bc.device) == (64, "constant", 100, "cpu")
        assert (bc.rel_tol, bc.patience) == (0.005, 5)
    assert cpu.workers == 2 and cpu.n_train == 20_000
    assert list(cpu.patch_models()) == ["recycled_4x4", "recycled_2x2"]
    assert cpu.patch_study.replace(patch=4) == cpu.recycled
    quick = BaselinesSpec.for_run(ReproduceConfig.paper(quick=True), "quick")
    assert quick.recycled.schedule == "constant" and quick.recycled.epochs > 20
    assert BaselinesSpec.from_dict(cpu.to_dict()) == cpu
    # the plan of the paper-size run: every training at its cap, within 3.5 hours
    seconds = estimate_seconds(ReproduceConfig.paper(quick=False), cpu)
    assert 3600 < seconds["baselines"] and sum(seconds.values()) < 3.5 * 3600


def test_patch_study_side_by_side(tmp_path, fast_figures):
    """Two trainings at a time in their own processes, the block's patch study, and the
    report's summary, patch-size section and provenance."""
    spec = tiny_spec()
    study = spec.recycled.replace(patch=4)
    spec = BaselinesSpec(spec.recycled, spec.vit, n_train=80, T=T, n_patch_images=10,
                         patch_study=study, patch_study_n_train=60, workers=2)  # fmt: skip
    out = tmp_path / "o"
    lines = []
    result = reproduce(out, config=ReproduceConfig.from_toml(CONFIG), baselines=spec,
                       progress=False, log=lines.append)  # fmt: skip
    assert sum("trained baseline-" in line for line in lines) == 6
    assert not list(out.glob("*.job.npz"))
    info = io.read(out / "baselines.h5")
    assert info.attrs["patch_models"] == ["recycled_2x2", "recycled_4x4"]
    for name in info.attrs["patch_models"]:
        attrs = io.read_group(out / "baselines.h5", f"models/{name}/masked")[1]
        assert attrs["n_train"] == 60 and f"models/{name}/denoise" not in info.groups
    # a training in its own process gives the training of this one
    alone = tiny_spec()
    images = pipeline.load_images(ReproduceConfig.from_toml(CONFIG).base)
    train = images.train[np.sort(np.random.default_rng(0).choice(len(images.train), 80, False))]
    from spinsa.baselines import train_baseline

    _, history = train_baseline(alone.recycled, train, "masked")
    side = io.read_group(out / "baselines.h5", "models/recycled/masked/history")[0]
    np.testing.assert_allclose(side["val_loss"], history.val_loss, rtol=1e-5)
    report = result.report.read_text()
    assert report.startswith("# Reproduction")
    assert "<!-- spinsa report: reproduce, format" in report
    assert "by `spinsa reproduce --config <a ReproduceConfig from Python>" in report
    for text in ("## Summary", "## Patch size", "the recycled block works best with 4x4 patches",
                 "cosine with the Hebbian couplings", "images/s", "| width |"):  # fmt: skip
        assert text in report
    assert report.index("## Summary") < report.index("## Setup")


def converged(epochs_used=12, max_epochs=100, ok=True):
    """The convergence attributes of a trained baseline."""
    curve = [1.0] * epochs_used if ok else 0.9 ** np.arange(epochs_used)
    return Convergence.of_curve(curve, max_epochs).to_attrs()


def test_claim_verdicts():
    bl = {
        "recycled": {
            t: {"best_t": 5, "best_error": 0.02, "best_sem": 1e-4, **converged()}
            for t in ("masked", "denoise")
        },
        "vit": {
            t: {"best_t": 1, "best_error": 0.01, "best_sem": 1e-4, **converged()}
            for t in ("masked", "denoise")
        },
    }
    sa = {"design": {t: {"best_t": 1, "best_error": 0.05} for t in ("masked", "denoise")}}
    medians = {"design": 0.001, "recycled": 0.01, "vit": 0.02}
    verdicts = assess_baseline_claims(bl, sa, medians)
    assert len(verdicts) == 7
    assert all(v[2] == "holds" for v in verdicts)
    bl["recycled"]["masked"] = {"best_t": 20, "best_error": 0.06, "best_sem": 1e-4, **converged()}
    bl["vit"]["denoise"]["best_error"] = 0.03
    verdicts = assess_baseline_claims(bl, sa, {**medians, "design": 0.05})
    bad = {(v[0], v[1]) for v in verdicts if v[2] == "does not hold"}
    assert bad == {
        ("the block's error is lowest for t in about 3-7", "masked"),
        ("the ViT is best", "denoise"),
        ("the block beats the bare SA given enough iterations", "masked, design"),
        (
            "predicted patches are more uniform for the bare SA than for the block and the ViT",
            "design",
        ),
    }


def test_unconverged_baselines_give_no_verdict():
    def attrs(**kw):
        return {"best_t": 5, "best_error": 0.02, "best_sem": 1e-4, **kw}

    bl = {
        "recycled": {t: attrs(**converged()) for t in ("masked", "denoise")},
        "vit": {t: attrs(**converged()) for t in ("masked", "denoise")},
    }
    bl["vit"]["masked"] = attrs(**converged(epochs_used=3, max_epochs=3, ok=False))
    bl["recycled"]["denoise"] = attrs(epochs=1)  # a file before the record
    sa = {"design": {t: {"best_t": 1, "best_error": 0.05} for t in ("masked", "denoise")}}
    medians = {"design": 0.001, "recycled": 0.01, "vit": 0.02}
    verdicts = {(v[0], v[1]): (v[2], v[3]) for v in assess_baseline_claims(bl, sa, medians)}
    stuck = "not converged after 3 epochs — no verdict"
    assert verdicts[("the ViT is best", "masked")][0] == stuck
    assert verdicts[("the ViT is best", "masked")][1].startswith("ViT (masked) not converged")
    assert verdicts[(SA_MORE_UNIFORM, "design")][0] == stuck  # rests on the masked ViT
    old = "not converged after 1 epoch — no verdict"
    assert verdicts[("the block's error is lowest for t in about 3-7", "denoise")][0] == old
    assert verdicts[("the ViT is best", "denoise")][0] == old  # rests on the block too
    # the converged ones keep theirs
    assert verdicts[("the block's error is lowest for t in about 3-7", "masked")][0] == "holds"
    assert verdicts[(BLOCK_BEATS_SA, "masked, design")][0] == "holds"
    assert no_verdict(converged()) is None
    assert no_verdict(converged(5, 5, ok=False)) == "not converged after 5 epochs — no verdict"


def test_quick_report_marks_the_baselines_not_converged(finished):
    """One epoch cannot meet the rule: every row and statement says so, none has a verdict."""
    out, _ = finished
    s = read_baseline_summaries(out / "baselines.h5")
    for model in ("recycled", "vit"):
        for task in ("masked", "denoise"):
            a = s[model][task]
            assert (a["converged"], a["epochs_used"], a["max_epochs"]) == (False, 1, 1)
            assert a["criterion"] == criterion_text() and a["n_val"] == 8
    section = "\n".join(baseline_report_lines(out / "baselines.h5", out / "reproduce.h5"))
    assert section.count("**not converged after 1 epoch — no verdict**") >= 4 + 7
    assert "**holds**" not in section and "**does not hold**" not in section
    assert "less than 0.5 % relative improvement of the best validation loss over 5" in section
    history = io.read_group(out / "baselines.h5", "models/vit/masked/history")[0]
    assert history["val_loss"].shape == history["epoch_loss"].shape == (1,)


def test_report_from_a_converged_baseline_gives_verdicts(finished, tmp_path):
    """The same files with the records set to converged (the baselines', and the bare SA's
    fit, which the tiny config stops at 3 iterations): the statements get verdicts, those
    against the references of the same inputs included; with the fit as it was, the
    statements about the bare SA are withheld."""
    import shutil

    import h5py

    out, _ = finished
    path, sa = tmp_path / "baselines.h5", tmp_path / "reproduce.h5"
    shutil.copy(out / "baselines.h5", path)
    shutil.copy(out / "reproduce.h5", sa)
    with h5py.File(path, "r+") as f:
        for model in ("recycled", "vit"):
            for task in ("masked", "denoise"):
                f[f"models/{model}/{task}"].attrs["converged"] = True
    lines = "\n".join(baseline_report_lines(path, sa))
    withheld = "**not converged after 3 iterations — no verdict**"
    assert lines.count(withheld) == 3  # the block against the bare SA, and its patches
    with h5py.File(sa, "r+") as f:
        f["models/design"].attrs["fit_converged"] = True
    lines = "\n".join(baseline_report_lines(path, sa))
    assert "— no verdict" not in lines
    assert lines.count("**holds**") + lines.count("**does not hold**") == 7 + 4
    assert lines.count("a backprop baseline beats every simple predictor") == 4
    assert "after 1 of at most 1 epochs" in lines


def test_quick_run_leaves_the_baselines_out_and_says_how_to_run_them():
    from spinsa.experiments.reproduce import _resolve_baselines

    lines = []
    quick = ReproduceConfig.paper(quick=True)
    assert _resolve_baselines(True, quick, True, False, lines.append) is None
    assert "--baselines quick" in lines[0] and "until the stopping rule" in lines[0]
    spec = _resolve_baselines("quick", quick, True, False, lines.append)
    assert spec.recycled.width == 32 and len(lines) == 1
    full = _resolve_baselines(True, ReproduceConfig.paper(quick=False), False, False, print)
    assert full == BaselinesSpec.for_run(ReproduceConfig.paper(quick=False), "cpu")
