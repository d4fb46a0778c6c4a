"""``spinsa reproduce``: the paper's bare-self-attention experiment end to end, resumable.

Stages, each writing its own file atomically into the output directory:

===================  ===============================  ======================================
stage                file                             what
===================  ===============================  ======================================
data                 ``data.h5``                      load (fetch on first use) the images
fit:<model>          ``fit-<model>.h5``               fit the couplings (checkpointed)
eval:<model>:<task>  ``eval-<model>-<task>.h5``       dynamics on the test set, errors at
                                                      every t, the references' errors
notebook:<model>     ``notebook-<model>.h5``          for a ``damico2024`` fit: the published
                                                      notebook's two printed measurements
assemble             ``reproduce.h5``                 everything above in one file
baselines            ``baselines.h5``                 recycled block and ViT trained by
                                                      backprop, their errors, patch variances
figures              ``fig1_errors.png``,             error vs t, one panel per model and
                     ``fig1_examples_<model>.png``,   task, references as lines; decoded
                     ``fig1_notebook_<model>.png``,   examples; the notebook's own view;
                     ``fig2_patch_variances.png``     masked-patch variances (baselines)
report               ``report.md``                    the numbers that decide fidelity
===================  ===============================  ======================================

A stage is done when its file exists, is a valid spinsa file whose checksums hold and holds
the same configuration; a killed run started again resumes after the last finished stage
(and the fit from its checkpoint). A stage runs again when a stage it depends on ran. A
directory with a finished run (``report.md`` next to a valid ``reproduce.h5``) is refused
unless ``overwrite=True``, which deletes the stage files and starts afresh. A partial run with a
different configuration is refused too. Before the first stage runs, the plan is printed
with an estimate of each stage's time (:func:`estimate_seconds`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._config import flatten
from spinsa._files import TEMP_GLOB, atomic_write_text
from spinsa._progress import peak_rss_mb
from spinsa.analysis.summary import SIGNIFICANT_Z, read_summaries
from spinsa.experiments import baselines as _baselines
from spinsa.experiments import pipeline
from spinsa.experiments.baselines import format_number as _fmt
from spinsa.experiments.baselines import format_pm as _pm
from spinsa.experiments.config import ExperimentConfig, ReproduceConfig
from spinsa.experiments.notebook import NOTEBOOK_KIND, notebook_check
from spinsa.io.results import REPRODUCE_KIND, model_names, read_tree
from spinsa.io.schema import RESERVED_KEYS, RESERVED_PREFIXES, to_json
from spinsa.references import REFERENCES
from spinsa.tasks import TASK_TITLES, TASKS, mean_sem

__all__ = [
    "FinishedRunError",
    "ReproduceResult",
    "reproduce",
    "estimate_seconds",
    "write_report",
    "assess_claims",
    "assess_references",
]

H5_NAME = "reproduce.h5"
REPORT_NAME = "report.md"
ERRORS_FIGURE = "fig1_errors.png"
DATA_KIND = "reproduce-data"
BASELINE_RECIPES = ("quick", "paper")


class FinishedRunError(FileExistsError):
    """The output directory already holds a finished run (and ``overwrite`` was not given)."""


@dataclass(frozen=True)
class ReproduceResult:
    """What :func:`reproduce` wrote.

    Attributes
    ----------
    out_dir : Path
    h5 : Path
        ``reproduce.h5``: every model's couplings, fit history and evaluations.
    report : Path
        ``report.md``.
    figures : tuple of Path
    timings : dict
        ``stage -> seconds`` for the stages run by this call (skipped stages are absent).
    """

    out_dir: Path
    h5: Path
    report: Path
    figures: tuple[Path, ...]
    timings: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------- helpers
def _canonical(d: dict) -> dict:
    return json.loads(to_json(d))


def _first_difference(a: dict, b: dict) -> str:
    fa, fb = flatten(a), flatten(b)
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key, "<absent>") != fb.get(key, "<absent>"):
            return f"{key} = {fa.get(key, '<absent>')!r} there, {fb.get(key, '<absent>')!r} now"
    return "(no difference found)"


def _intact(path: Path) -> bool:
    """Whether ``path`` is a spinsa file whose checksums hold (a missing file is not)."""
    try:
        io.verify(path)
    except io.SpinsaFileError:
        return False
    return True


@dataclass
class _Stage:
    """One stage: the files it writes, how, what it needs, and the config they must hold."""

    name: str
    outputs: list[Path]
    run: Callable[[], None]
    deps: list[str]
    config: dict | None = None  # None: done when every output exists

    def done(self) -> bool:
        if self.config is None:
            return all(p.is_file() for p in self.outputs)
        path = self.outputs[0]
        if not _intact(path):  # missing, unreadable or damaged: the stage runs again
            return False
        stored, expected = _canonical(io.read(path).config), _canonical(self.config)
        if stored != expected:
            raise ValueError(
                f"{path.parent} holds a run with a different configuration ({path.name}: "
                f"{_first_difference(stored, expected)}); pass overwrite=True (--overwrite) to "
                "start afresh, or choose another output directory"
            )
        return True


def _stage_files(out_dir: Path) -> list[Path]:
    patterns = ["data.h5", "fit-*.h5", "eval-*.h5", "notebook-*.h5", H5_NAME, "fig1_*.png"]
    patterns += [REPORT_NAME, _baselines.BASELINES_NAME, "baseline-*.pt", "fig2_*.png"]
    return [p for pattern in patterns for p in out_dir.glob(pattern) if p.is_file()]


def _log(message: str) -> None:
    print(message, flush=True)


def _resolve_config(config, quick: bool) -> ReproduceConfig:
    if config is None:
        return ReproduceConfig.paper(quick=quick)
    if isinstance(config, ReproduceConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return ReproduceConfig.from_toml(config)
    raise ValueError(
        f"config must be a ReproduceConfig, a TOML path or None, got {type(config).__name__}"
    )


def _has_notebook_check(exp: ExperimentConfig) -> bool:
    """The published notebook's numbers apply to fits of its preset (epochs known)."""
    return exp.fit.preset == "damico2024" and exp.fit.backend == "torch"


# ---------------------------------------------------------------------------- estimates
# Seconds per unit of work, measured with `spinsa reproduce` on a 2-core AVX-512 machine
# (N^2 d^2 = 196^2 * 64 for the paper's 2x2 patches); other machines differ, ratios hold.
_COST = {
    "lbfgs_eval": 6.6e-11,  # one objective + gradient (with L-BFGS), per pattern and pair unit
    "lbfgs_evals": 7,  # objective evaluations of a fit at the notebook's |J| (converges)
    "torch_epoch": 2.8e-11,  # one damico2024 epoch (one site per step), per pattern and unit
    # training methods (docs/training-methods.md, batch 256): per pattern and pair unit
    "pl_epoch": 5.1e-11,  # one all-sites pseudo-likelihood epoch
    "cd_epoch": 1.2e-10,  # one CD-1 epoch at lambda_train = 5 ...
    "cd_step": 2.9e-11,  # ... and each further step of the chains
    "bptt_epoch": 2.6e-9,  # one backprop-through-dynamics epoch, per unrolled step
    "dynamics": 6.5e-11,  # one step of one image, per pair unit, errors included
    "references": 2.5e-3,  # the references of one task, per test image (50,000 training)
    "baseline_quick": 5.5e-4,  # one training image-epoch of the quick recipe, CPU
    "baseline_paper": 3.6e-3,  # the paper's recipe (width 128), CPU: ~5 h per model and task
    "baseline_eval": 1.5e-4,  # one iteration of the recycled block on one test image
}


def _epoch_cost(fit) -> float:
    """Seconds of one minibatch epoch per pattern and pair unit, by training method."""
    if fit.method == "bptt":
        return _COST["bptt_epoch"] * (fit.tau_min + fit.tau_max) / 2
    if fit.method == "cd":
        return _COST["cd_epoch"] + (fit.k - 1) * _COST["cd_step"]
    return _COST["torch_epoch" if fit.site_sampling == "one" else "pl_epoch"]


def estimate_seconds(cfg: ReproduceConfig, bl_spec=None, cuda: bool = False) -> dict[str, float]:
    """Estimated wall time of each stage of a reproduce run, from its sizes alone.

    The costs per unit were measured on a 2-core machine (``_COST``); they are estimates to
    decide whether to start, not predictions to the minute. Baselines on a CUDA device are
    not estimated (NaN): they were not measured here.

    Returns
    -------
    dict
        ``stage name -> seconds``.
    """
    out: dict[str, float] = {"data": 10.0, "assemble": 5.0, "figures": 10.0, "report": 1.0}
    for name, exp in cfg.experiments().items():
        emb = exp.make_embedding()
        units = emb.n_tokens**2 * emb.d**2
        evaluation = _COST["lbfgs_eval"] * (exp.data.n_train_images or 60_000) * units
        if exp.fit.backend == "lbfgs":
            out[f"fit:{name}"] = min(exp.fit.max_iter, _COST["lbfgs_evals"]) * evaluation
        else:  # the epochs, and a full evaluation before them and every eval_every epochs
            n_evals = 1 + -(-exp.fit.epochs // exp.fit.eval_every)
            epoch = _epoch_cost(exp.fit) * (exp.data.n_train_images or 60_000) * units
            out[f"fit:{name}"] = n_evals * evaluation + exp.fit.epochs * epoch
        for task in TASKS:
            dyn = exp.dynamics.steps * _COST["dynamics"] * units + _COST["references"]
            out[f"eval:{name}:{task}"] = exp.data.n_test * dyn
        if _has_notebook_check(exp):
            out[f"notebook:{name}"] = 20.0
    if bl_spec is not None:
        n = bl_spec.n_train or cfg.base.data.n_train_images or 60_000
        total = len(TASKS) * cfg.base.data.n_test * bl_spec.T * _COST["baseline_eval"]
        for bc in bl_spec.configs().values():
            per = _COST["baseline_paper" if bc.width >= 128 else "baseline_quick"]
            on_gpu = cuda and bc.device in ("auto", "cuda")
            total += math.nan if on_gpu else len(TASKS) * bc.epochs * n * per
        out["baselines"] = total
    return out


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "not estimated (GPU)"
    if seconds < 90:
        return f"~{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------- reproduce
def reproduce(
    out_dir,
    quick: bool = True,
    overwrite: bool = False,
    config: ReproduceConfig | str | os.PathLike | None = None,
    *,
    progress: bool = True,
    fetch: bool = True,
    log: Callable[[str], None] | None = _log,
    baselines=True,
) -> ReproduceResult:
    """Run the paper's experiment (or ``config``'s) into ``out_dir``; resumable.

    Parameters
    ----------
    out_dir : str or PathLike
        Output directory (created if missing).
    quick : bool
        With ``config=None``: the quick configuration (10,000 training images, 1,000 test
        images) instead of the full one (50,000 and 10,000). See
        :meth:`ReproduceConfig.paper`.
    overwrite : bool
        Start afresh in a directory that holds a finished run, or a partial run of another
        configuration: the stage files are deleted first.
    config : ReproduceConfig, str or PathLike, optional
        A configuration (or its TOML file) instead of the paper's.
    progress : bool
        Progress bars for the fits and the dynamics.
    fetch : bool
        Fetch MNIST / Fashion-MNIST into the cache on first use.
    log : callable or None
        Where the plan and the stage lines go (default: stdout); None is silent.
    baselines : bool, {"quick", "paper", "none"} or BaselinesSpec
        Train and compare the backprop baselines (recycled block and ViT, stage
        ``baselines``). ``"quick"``: the brief CPU recipe (1 epoch, width 32, on 3,000
        images); ``"paper"``: the paper's recipe (100 epochs, width 128, on every training
        image; hours per model and task on a CPU, meant for a GPU); True: ``"quick"`` for a
        quick run, ``"paper"`` otherwise (skipped with a note when torch is not installed);
        a :class:`~spinsa.experiments.baselines.BaselinesSpec` for another recipe; False or
        ``"none"`` to skip them.

    Returns
    -------
    ReproduceResult

    Raises
    ------
    FinishedRunError
        ``out_dir`` holds a finished run and ``overwrite`` is False.
    ValueError
        ``out_dir`` holds a partial run of a different configuration, or a bad config.
    """
    say = log or (lambda message: None)
    cfg = _resolve_config(config, quick)
    experiments = cfg.experiments()
    bl_spec = _resolve_baselines(baselines, cfg, quick, say)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / REPORT_NAME).is_file() and _intact(out_dir / H5_NAME) and not overwrite:
        raise FinishedRunError(
            f"{out_dir} already holds a finished run ({REPORT_NAME}, {H5_NAME}); pass "
            "overwrite=True (--overwrite) to run it again, or choose another output directory"
        )
    if overwrite:
        for path in _stage_files(out_dir):
            path.unlink()
    for path in out_dir.glob(TEMP_GLOB):  # left by a writer killed outright (one run a dir)
        path.unlink(missing_ok=True)

    images_cache: dict[Any, pipeline.Images] = {}

    def images_for(exp: ExperimentConfig) -> pipeline.Images:
        if exp.data not in images_cache:
            images_cache[exp.data] = pipeline.load_images(exp, fetch=fetch)
        return images_cache[exp.data]

    base = cfg.base
    stages: list[_Stage] = []

    def file_of(stage: str) -> Path:  # "eval:x:masked" -> eval-x-masked.h5
        return out_dir / (stage.replace(":", "-") + ".h5")

    def add(name, run, deps, config=None, outputs=None):
        outputs = [file_of(name)] if outputs is None else list(outputs)
        stages.append(_Stage(name, outputs, run, list(deps), config))

    # ---- data
    def run_data():
        imgs = images_for(base)
        for exp in experiments.values():
            images_for(exp)
        io.write_file(
            file_of("data"),
            {
                "mean_train_image": imgs.train.mean(axis=0, dtype=np.float64),
                "train_label_counts": np.bincount(imgs.train_labels, minlength=10),
                "test_label_counts": np.bincount(imgs.test_labels, minlength=10),
            },
            {
                "n_train": int(imgs.train.shape[0]),
                "n_test": int(imgs.test.shape[0]),
                "dataset": base.data.dataset,
            },
            kind=DATA_KIND,
            config={"data": dict(_canonical(base.to_dict())["data"])},
            seeds={"data": base.data.seed},
            overwrite=True,
        )

    add("data", run_data, [], {"data": base.to_dict()["data"]})

    # ---- fits, evaluations, the notebook's measurements
    for name, exp in experiments.items():

        def run_fit(exp=exp):
            pipeline.train(
                exp,
                file_of(f"fit:{exp.name}"),
                overwrite=True,
                checkpoint=out_dir / f"fit-{exp.name}.ckpt.h5",
                progress=progress,
                images=images_for(exp),
            )

        add(f"fit:{name}", run_fit, ["data"], exp.to_dict())

    for name, exp in experiments.items():
        for task in TASKS:

            def run_eval(exp=exp, task=task):
                pipeline.evaluate(
                    file_of(f"fit:{exp.name}"),
                    task,
                    out=file_of(f"eval:{exp.name}:{task}"),
                    overwrite=True,
                    progress=progress,
                    images=images_for(exp),
                )

            add(f"eval:{name}:{task}", run_eval, [f"fit:{name}"], exp.to_dict())

    notebook_models = [n for n, e in experiments.items() if _has_notebook_check(e)]
    for name in notebook_models:

        def run_notebook(exp=experiments[name]):
            fpath = file_of(f"fit:{exp.name}")
            arrays, attrs = notebook_check(
                exp,
                io.read_array(fpath, "J"),
                images_for(exp),
                io.read_array(fpath, "fit/history/step_loss"),
                exp.fit.epochs,
                fetch=fetch,
            )
            io.write_file(
                file_of(f"notebook:{exp.name}"),
                arrays,
                attrs,
                kind=NOTEBOOK_KIND,
                config=exp,
                seeds={"tasks": exp.tasks.seed},
                overwrite=True,
            )

        add(f"notebook:{name}", run_notebook, [f"fit:{name}"], experiments[name].to_dict())

    # ---- assemble, baselines, figures, report
    h5_path = out_dir / H5_NAME
    timings: dict[str, float] = {}

    def run_assemble():
        _assemble(h5_path, cfg, experiments, file_of, quick, timings)

    evals_and_checks = [s.name for s in stages if s.name.startswith(("eval:", "notebook:"))]
    add("assemble", run_assemble, ["data", *evals_and_checks], cfg.to_dict(), [h5_path])

    bl_path = out_dir / _baselines.BASELINES_NAME
    figure_deps = ["assemble"]
    if bl_spec is not None:

        def run_bl():
            _baselines.run_baselines(
                bl_path, cfg, bl_spec, images_for(base), h5_path, progress=progress, log=say
            )

        add("baselines", run_bl, ["assemble"], _baselines.stage_config(cfg, bl_spec))
        figure_deps.append("baselines")

    with_bl = bl_path if bl_spec is not None else None
    # file -> how to draw it (plotting is imported when the stage runs)
    figures = {out_dir / ERRORS_FIGURE: lambda p: p.figure_errors(h5_path, baselines=with_bl)}
    for n in experiments:
        path = out_dir / f"fig1_examples_{n}.png"
        figures[path] = lambda p, n=n: p.figure_examples(h5_path, model=n)
    for n in notebook_models:
        path = out_dir / f"fig1_notebook_{n}.png"
        figures[path] = lambda p, n=n: p.figure_notebook_view(h5_path, model=n)
    if bl_spec is not None:
        figures[out_dir / "fig2_patch_variances.png"] = lambda p: p.figure_patch_variances(bl_path)

    def run_figures():
        from spinsa import plotting

        for path, draw in figures.items():
            plotting.save_figure(draw(plotting), path)

    add("figures", run_figures, figure_deps, outputs=figures)

    report_path = out_dir / REPORT_NAME

    def run_report():
        write_report(
            h5_path,
            report_path,
            figures=[p.name for p in figures],
            timings={k: v for k, v in timings.items() if k in ("assemble", "baselines", "figures")},
            baselines=with_bl,
        )

    add("report", run_report, figure_deps + ["figures"], outputs=[report_path])

    # ---- the plan, then the stages
    estimates = estimate_seconds(cfg, bl_spec, cuda=_cuda_available() if bl_spec else False)
    size = "configured" if config is not None else ("quick" if quick else "paper-size")
    _say_plan(say, stages, estimates, out_dir, len(experiments), size, bl_spec)
    ran: set[str] = set()
    measured: dict[str, float] = {}
    t_all = time.perf_counter()
    for i, stage in enumerate(stages, 1):
        must_run = any(dep in ran for dep in stage.deps) or not stage.done()
        label = f"[{i}/{len(stages)}] {stage.name}"
        if not must_run:
            say(f"{label}: done earlier, skipped")
            continue
        say(f"{label} ...")
        t0 = time.perf_counter()
        stage.run()
        dt = time.perf_counter() - t0
        timings[stage.name] = measured[stage.name] = dt
        ran.add(stage.name)
        say(f"{label}: {dt:.1f} s")
    total = time.perf_counter() - t_all
    _say_stage_table(say, stages, estimates, measured, total)
    say(
        f"spinsa reproduce: finished in {total:.1f} s ({total / 60:.1f} min), peak memory "
        f"{peak_rss_mb() / 1024:.2f} GB; report: {report_path}"
    )
    return ReproduceResult(out_dir, h5_path, report_path, tuple(figures), timings)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _say_plan(say, stages, estimates, out_dir, n_models, size, bl_spec) -> None:
    """The stages to run and their estimated times, before any of them starts."""
    say(
        f"spinsa reproduce: {n_models} model(s), {size} run in {out_dir}; estimated times "
        "(from a 2-core machine):"
    )
    todo = 0.0
    for stage in stages:
        est = estimates.get(stage.name, math.nan)
        say(f"  {stage.name:<28} {_duration(est)}")
        todo += est if np.isfinite(est) else 0.0
    say(f"  {'total':<28} {_duration(todo)} (stages finished earlier are skipped)")
    if bl_spec is not None and estimates.get("baselines", 0.0) > 3600:
        say(
            "  the baselines' paper recipe takes hours on a CPU; pass --baselines quick for "
            "the brief recipe, or run it on a GPU"
        )


def _say_stage_table(say, stages, estimates, measured, total) -> None:
    """Every stage's estimated and measured wall time, after the run."""
    say(f"  {'stage':<28} {'estimated':>10} {'measured':>10}")
    for stage in stages:
        est = estimates.get(stage.name, math.nan)
        took = f"{measured[stage.name]:.1f} s" if stage.name in measured else "earlier"
        say(f"  {stage.name:<28} {_duration(est):>10} {took:>10}")
    say(f"  {'total':<28} {'':>10} {total:.1f} s")


def _resolve_baselines(baselines, cfg: ReproduceConfig, quick: bool, say):
    """The BaselinesSpec of the run, or None to skip the baselines."""
    if baselines is False or baselines is None or baselines == "none":
        return None
    if isinstance(baselines, _baselines.BaselinesSpec):
        return baselines
    if baselines is True:
        baselines = "quick" if quick else "paper"
    if baselines not in BASELINE_RECIPES:
        raise ValueError(
            "baselines must be True, False, 'quick', 'paper', 'none' or a BaselinesSpec, got "
            f"{baselines!r}"
        )
    if importlib.util.find_spec("torch") is None:
        say(
            "spinsa reproduce: torch is not installed, the baselines are skipped (pip install "
            '"spinsa[torch]", or pass --baselines none to silence this)'
        )
        return None
    return _baselines.BaselinesSpec.for_run(cfg, quick=baselines == "quick")


def _assemble(h5_path: Path, cfg, experiments, file_of, quick, timings) -> None:
    """Copy the fit, evaluation and notebook files of every model into one ``reproduce.h5``."""

    def own(attrs: dict) -> dict:
        """The writer's attributes, without the provenance a new group gets anew."""
        return {
            k: v
            for k, v in attrs.items()
            if k not in RESERVED_KEYS and not k.startswith(RESERVED_PREFIXES)
        }

    arrays: dict[str, Any] = {}
    group_attrs: dict[str, dict] = {}
    stage_times: dict[str, float] = {}
    for name, exp in experiments.items():
        fit, root = read_tree(file_of(f"fit:{name}"), "/")  # the fit file, read once
        tree = {"J": fit["J"], "fit": fit["fit"], "data": fit["data"], "evaluation": {}}
        attrs = {k: v for k, v in root.items() if k.startswith("fit_") or k == "n_train"}
        attrs["experiment_config"] = exp.to_dict()
        stage_times[f"fit:{name}"] = float(root.get("fit_wall_time", math.nan))
        for task in TASKS:
            epath = file_of(f"eval:{name}:{task}")
            tree["evaluation"][task], eattrs = read_tree(epath, f"evaluation/{task}")
            group_attrs[f"models/{name}/evaluation/{task}"] = own(eattrs)
            stage_times[f"eval:{name}:{task}"] = float(eattrs.get("wall_time", math.nan))
        if _has_notebook_check(exp):
            tree["notebook"], nb_attrs = read_tree(file_of(f"notebook:{name}"), "/")
            group_attrs[f"models/{name}/notebook"] = own(nb_attrs)
        arrays[f"models/{name}"] = tree
        group_attrs[f"models/{name}"] = attrs
    stage_times.update(
        {k: v for k, v in timings.items() if k in stage_times or k.startswith(("data", "notebook"))}
    )
    io.write_file(
        h5_path,
        arrays,
        {"models": list(experiments), "quick": bool(quick), "stage_times": stage_times},
        kind=REPRODUCE_KIND,
        config=cfg.to_dict(),
        group_attrs=group_attrs,
        overwrite=True,
    )


# ---------------------------------------------------------------------------- report
def _best(s: dict) -> str:
    return f"t = {s['best_t']}: " + _pm(s["best_error"], s["best_sem"])


def _row(label: str, cells) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


# The rows of the report's table of numbers, for each task: label, cell from a summary.
_NUMBER_ROWS = [
    ("error at t = 0 (input)", lambda s: _pm(s["error_t0"], s["sem_t0"])),
    ("error at t = 1", lambda s: _pm(s["error_t1"], s["sem_t1"])),
    ("best t and its error", _best),
    ("error at t = T", lambda s: _pm(s["error_T"], s["sem_T"])),
    (
        "masked pixels only: t = 0 / best t / T",
        lambda s: " / ".join(
            _fmt(s[k]) for k in ("masked_error_t0", "masked_error_best", "masked_error_T")
        ),
    ),
    (
        "correlation of the state at t = T with the mean training digit",
        lambda s: _pm(s["corr_T"], s["corr_T_sem"], 3),
    ),
    (
        "correlation of the final images with their own mean",
        lambda s: _pm(s["coherence_T"], s["coherence_T_sem"], 3),
    ),
    ("mean token change in the last step", lambda s: f"{s['step_change_T']:.2e}"),
]
_HOLE_REFS = ("mean_fill", "harmonic")  # the references of the masked pixels' own column
ONE_ATTRACTOR_COHERENCE = 0.9  # final images correlate at least this much with their mean
RESEMBLES_MEAN_DIGIT = 0.5  # correlation with the mean training image that we call "resembles"
MASKED_CLAIM = "masked: lowest after about one iteration, then grows"
DENOISE_CLAIM = "denoising: falls for several iterations (paper: about ten), then rises"
LATE_CLAIM = "late states: one global attractor that resembles the mean digit"


def _verdict(conditions: list[bool]) -> str:
    if all(conditions):
        return "holds"
    return "partly" if any(conditions) else "does not hold"


def _relation(gain_z: float) -> str:
    """How the best error compares with the input's, from (input - best) / se."""
    if gain_z > SIGNIFICANT_Z:
        return "below"
    return "above" if gain_z < -SIGNIFICANT_Z else "not significantly different from"


def _then(s: dict) -> str:
    """How the error goes on after the best t: "then rises to ... at t = T (z ...)"."""
    rise = "rises" if s["rise_z"] > SIGNIFICANT_Z else "does not rise significantly"
    return (
        f"then {rise} to {_fmt(s['error_T'])} at t = {s['T']} "
        f"({_fmt(s['rise_z'], 1)} standard errors)"
    )


def assess_references(summaries: dict[str, dict[str, dict]]) -> list[tuple[str, str, str, str]]:
    """Does each model hold a transient memory that simple predictors do not?

    A model holds one on a task when its best error (t >= 1 for the masked task) is below the
    best reference's by more than 3 combined standard errors (:data:`SIGNIFICANT_Z`).

    Parameters
    ----------
    summaries : dict
        ``model -> task -> summarize_arrays(...)``.

    Returns
    -------
    list of (model, task, verdict, evidence)
        Verdict "holds" or "does not hold"; tasks without references are left out.
    """
    out = []
    for model, tasks in summaries.items():
        for task, s in tasks.items():
            refs = s.get("references") or {}
            if not refs:
                continue
            labels = REFERENCES[task]  # in the documented order
            r = refs[s["best_reference"]]
            beaten = [labels[n] for n in labels if n in refs and n in s["beats"]]
            not_beaten = [labels[n] for n in labels if n in refs and n not in s["beats"]]
            why = (
                f"best error {_pm(s['best_error'], s['best_sem'])} at t = {s['best_t']}; "
                f"best reference: {labels[s['best_reference']]}, {_pm(r['error'], r['sem'])} "
                f"(z = {_fmt(r['z'], 1)}); beats: {', '.join(beaten) or 'none'}; "
                f"does not beat: {', '.join(not_beaten) or 'none'}"
            )
            out.append((model, task, "holds" if s["transient_memory"] else "does not hold", why))
    return out


def assess_claims(summaries: dict[str, dict[str, dict]]) -> list[tuple[str, str, str, str]]:
    """Plain verdicts on the paper's three claims as literally stated, model by model.

    These compare a model with itself (its input, its later states); whether it beats simple
    predictors is :func:`assess_references`. Each claim is split into conditions; the
    verdict is ``"holds"`` when all are met, ``"does not hold"`` when none is, ``"partly"``
    otherwise. A rise or a fall counts when it exceeds 3 combined standard errors
    (:data:`SIGNIFICANT_Z`).

    * masked prediction, "lowest after about one iteration, then grows": the best t over
      t >= 1 is 1 or 2; the best error is below the masked input's (t = 0); the error at T
      is above the best;
    * denoising, "falls for several iterations (the paper: about ten) before rising": the
      best error is below the noisy input's; the error at T is above the best; the best t is
      within a factor of three of ten (3 <= t <= 30);
    * late states, "one global attractor that resembles the mean digit": on both tasks the
      final images correlate >= 0.9 on average with their own mean (one attractor) and >= 0.5
      with the mean training image.

    Parameters
    ----------
    summaries : dict
        ``model -> task -> summarize_arrays(...)``.

    Returns
    -------
    list of (claim, model, verdict, evidence)
    """
    out = []
    for model, tasks in summaries.items():
        m = tasks.get("masked")
        if m is not None:
            early = m["best_t"] <= 2
            gain = m["gain_z"] > SIGNIFICANT_Z
            rises = m["rise_z"] > SIGNIFICANT_Z
            why = (
                f"best t = {m['best_t']}, error {_fmt(m['best_error'])}, "
                f"{_relation(m['gain_z'])} the masked input's "
                f"{_fmt(m['error_t0'])} ({_fmt(m['gain_z'], 1)} standard errors); {_then(m)}"
            )
            out.append((MASKED_CLAIM, model, _verdict([early, gain, rises]), why))
        d = tasks.get("denoise")
        if d is not None:
            falls = d["gain_z"] > SIGNIFICANT_Z
            rises = d["rise_z"] > SIGNIFICANT_Z
            about_ten = 3 <= d["best_t"] <= 30
            why = (
                f"{'falls' if falls else 'does not fall significantly'} from "
                f"{_fmt(d['error_t0'])} to {_fmt(d['best_error'])} at best t = "
                f"{d['best_t']} ({_fmt(d['gain_z'], 1)} standard errors; paper: about 10"
                f"{'' if about_ten else ', so not within a factor of three'}); {_then(d)}"
            )
            out.append((DENOISE_CLAIM, model, _verdict([falls, rises, about_ten]), why))
        if tasks:
            one = all(tasks[t]["coherence_T"] >= ONE_ATTRACTOR_COHERENCE for t in tasks)
            like = all(tasks[t]["corr_T"] >= RESEMBLES_MEAN_DIGIT for t in tasks)
            why = (
                "final images vs their own mean: "
                + ", ".join(f"{t} {_fmt(tasks[t]['coherence_T'], 3)}" for t in tasks)
                + "; vs the mean training digit: "
                + ", ".join(f"{t} {_fmt(tasks[t]['corr_T'], 3)}" for t in tasks)
            )
            out.append((LATE_CLAIM, model, _verdict([one, like]), why))
    return out


def _reference_lines(models, summaries) -> list[str]:
    """One table per task: each model's best error and every reference's, with z."""
    lines = [
        "## Against simple references",
        "",
        "Every model's best error next to simple predictors computed on the same corrupted "
        "test images, in the model's own pixel space (`spinsa.references`): the masked "
        "input; the mean training image in the hole; harmonic inpainting (each masked pixel "
        "the mean of its 3x3 neighbours, solved exactly); the nearest training image on the "
        "visible pixels; the noisy input; the mean training image; a Gaussian blur and the "
        "mean of the k nearest training images, sigma and k chosen on (up to 1,000) "
        "corrupted training images, never on the test set. z = (reference - best) / "
        "combined standard error; a model beats a reference when z > 3. The best t is "
        "chosen on the test images themselves, which favours the model slightly.",
        "",
    ]
    for task, title in TASK_TITLES.items():
        cols = {m: summaries[m][task] for m in models if task in summaries[m]}
        if not any(s.get("references") for s in cols.values()):
            continue
        lines += [f"**{title}** (mean squared error over all pixels)", ""]
        lines += ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        lines.append(_row("model, best t", [_best(s) for s in cols.values()]))
        for name, label in REFERENCES[task].items():
            cells = []
            for s in cols.values():
                r = s["references"].get(name)
                if r is None:
                    cells.append("n/a")
                    continue
                mark = "beaten" if r["z"] > SIGNIFICANT_Z else "**not beaten**"
                cells.append(f"{_pm(r['error'], r['sem'])} (z = {_fmt(r['z'], 1)}, {mark})")
            lines.append(_row(label, cells))
        if task == "masked":
            cells = [
                " / ".join(
                    [_fmt(s["masked_error_best"])]
                    + [_fmt(s["references"].get(n, {}).get("masked_error")) for n in _HOLE_REFS]
                )
                for s in cols.values()
            ]
            label = "masked pixels only: model at best t / mean image in the hole / harmonic"
            lines.append(_row(label, cells))
        lines.append("")
    lines += [
        "**Transient memory**: the model's best error below the best reference's by more "
        "than 3 combined standard errors.",
        "",
        "| model | task | verdict | evidence |",
        "|---|---|---|---|",
    ]
    for model, task, verdict, why in assess_references(summaries):
        lines.append(f"| {model} | {task} | **{verdict}** | {why} |")
    return lines


def _notebook_lines(model: str, nb: dict, attrs: dict, data: dict) -> list[str]:
    """The published notebook's printed numbers next to the same measurements here."""
    published_loss = {int(k): float(v) for k, v in attrs["published_train_loss"].items()}
    published_val = {int(k): float(v) for k, v in attrs["published_validation"].items()}
    tol, vtol = attrs["loss_tolerance"], attrs["validation_tolerance"]
    target = attrs["validation_target"]
    comparable = data.get("dataset") == "mnist" and data.get("per_class") == 1000
    loss = np.asarray(nb["train_loss"], dtype=np.float64)
    n_epochs = int(attrs["n_epochs"])
    lines = [
        f"## The published notebook, side by side ({model})",
        "",
        "The notebook (`bare_self_attention.ipynb`, Francill99/self_attention_attractor_network) "
        "prints after every epoch the mean of the epoch's minibatch training losses and a "
        "validation score: 1 - MSE over the masked pixels, in its pixel space min(2p, 1), after "
        f"{attrs['steps']} steps of its dynamics (lambda = 1, g = 0.5) on a test batch of 256 "
        "images with 30 % of the tokens masked. The same two measurements on this fit "
        f"(scores on the first {attrs['n_images']} test images; masks from spinsa's seeded "
        "streams, the notebook's are unseeded):",
        "",
    ]
    if not comparable:
        lines += [
            "(The published numbers are for MNIST with 1,000 training images per class; this "
            f"run fits {data.get('dataset')} with {data.get('per_class')} per class, so the "
            "comparison below is not a test: `spinsa reproduce --quick` makes the notebook's.)",
            "",
        ]
    lines += ["| epoch | notebook | spinsa | difference | within ±" + f"{tol:g} |"]
    lines.append("|---|---|---|---|---|")
    within_all = []
    for epoch in range(1, n_epochs + 1):
        ours = float(loss[epoch - 1])
        pub = published_loss.get(epoch)
        if pub is None:
            lines.append(f"| {epoch} | - | {ours:.4f} | - | - |")
            continue
        ok = abs(ours - pub) <= tol
        within_all.append(ok)
        lines.append(
            f"| {epoch} | {pub:.4f} | {ours:.4f} | {ours - pub:+.4f} | {'yes' if ok else 'no'} |"
        )
    score, sem, _ = mean_sem(nb["masked_score"])
    last = max(published_val)
    ok_val = abs(float(score) - target) <= vtol
    lines += [
        "",
        f"| validation score (masked pixels, 1 - MSE after {attrs['steps']} steps) | value |",
        "|---|---|",
        f"| notebook, epoch {last} (epoch {last - 1}: {published_val[last - 1]:.3f}) | "
        f"{published_val[last]:.3f} |",
        f"| spinsa, after epoch {n_epochs} | {_pm(float(score), float(sem), 3)} |",
    ]
    labels = attrs.get("reference_labels", {})
    refs = {n: nb["references"][n] for n in REFERENCES["masked"] if n in nb.get("references", {})}
    for name, values in refs.items():
        m, e, _ = mean_sem(values)
        lines.append(f"| reference: {labels.get(name, name)} | {_pm(float(m), float(e), 3)} |")
    best_name = max(refs, key=lambda n: np.nanmean(refs[n]))
    bm, be, _ = mean_sem(nb["references"][best_name])
    z = (float(score) - float(bm)) / math.sqrt(float(sem) ** 2 + float(be) ** 2)
    lines += [
        "",
        f"Training losses within ±{tol:g} of the printed ones at "
        f"{sum(within_all)} of {len(within_all)} printed epochs; validation score "
        f"{_fmt(float(score), 3)} against the target {target} ± {vtol} "
        f"({'within' if ok_val else 'outside'}). On the same images and metric the best "
        f"reference, {labels.get(best_name, best_name)}, scores {_fmt(float(bm), 3)}: the "
        f"fitted model is {'above' if z > SIGNIFICANT_Z else 'not significantly above'} it "
        f"(z = {_fmt(z, 1)}).",
    ]
    return lines


def write_report(
    h5_path,
    out_path,
    figures: list[str] | None = None,
    timings: dict[str, float] | None = None,
    baselines=None,
) -> Path:
    """Write ``report.md`` from a ``reproduce.h5`` (reads the file only).

    Parameters
    ----------
    h5_path : str or PathLike
    out_path : str or PathLike
    figures : list of str, optional
        File names of the figures to embed (relative to the report).
    timings : dict, optional
        Wall times of stages not recorded in the file (assembling, baselines, figures).
    baselines : str or PathLike, optional
        A ``baselines.h5``: adds the section on the backprop baselines.

    Returns
    -------
    Path
    """
    h5_path, out_path = Path(h5_path), Path(out_path)
    info = io.read(h5_path)
    models = model_names(h5_path)
    summaries = {m: read_summaries(h5_path, m) for m in models}
    # the attributes only: read_group leaves the model's evaluations and fit history unread
    model_attrs = {m: io.read_group(h5_path, f"models/{m}")[1] for m in models}
    exp = {m: model_attrs[m]["experiment_config"] for m in models}
    first = exp[models[0]]
    data, emb, dyn, tasks = first["data"], first["embedding"], first["dynamics"], first["tasks"]
    embedding = ExperimentConfig.from_dict(first).make_embedding()
    n_train = model_attrs[models[0]].get("n_train")
    n_test = data["n_test"]
    stage_times = {**(info.attrs.get("stage_times", {}) or {}), **(timings or {})}
    order = ["data"] + [f"fit:{m}" for m in models]
    order += [f"eval:{m}:{t}" for m in models for t in TASKS]
    order += [f"notebook:{m}" for m in models] + ["assemble", "baselines", "figures"]
    rank = {k: i for i, k in enumerate(order)}
    stage_times = dict(sorted(stage_times.items(), key=lambda kv: rank.get(kv[0], len(rank))))

    lines = [
        "# Reproduction: bare self-attention as an attractor network on MNIST",
        "",
        "F. D'Amico and M. Negri, *Self-attention as an attractor network: transient memories "
        "without backpropagation* (2024), Fig. 1: masked prediction and denoising by the "
        "dynamics of a fitted bare self-attention layer.",
        "",
        f"Written by spinsa {info.attrs.get('spinsa_version')} on {info.attrs.get('host')} at "
        f"{info.attrs.get('created')} from `{h5_path.name}`.",
        "",
        "## Setup",
        "",
        f"- data: {data['dataset']}, {n_train} training images"
        + (f" ({data['per_class']} per class)" if data.get("per_class") else "")
        + f", {n_test} test images, seed {data['seed']}",
        f"- embedding: {emb['patch']}x{emb['patch']} patches, N = {embedding.n_tokens} tokens, "
        f"d = {embedding.d}",
        f"- lambda_train = {first['fit']['lam']:g}, lambda_eval = {dyn['lam_eval']:g}",
        f"- masked prediction: {tasks['mask_fraction']:.0%} of the tokens set to zero "
        f"(int({tasks['mask_fraction']:g} N) = "
        f"{int(tasks['mask_fraction'] * embedding.n_tokens * (1 + 1e-9))} of "
        f"{embedding.n_tokens})"
        f"{', visible tokens clamped' if tasks['clamp_visible'] else ''}; denoising: "
        f"Gaussian noise of variance {tasks['noise_variance']:g}, image statistics restored; "
        "test image k is corrupted from its own random stream (the same in every model)",
        "- errors: mean squared pixel error per image, in the embedding's pixel space, "
        "averaged over test images (± standard error of the mean)",
        "",
        "Models:",
        "",
    ]
    for m in models:
        e, a = exp[m], model_attrs[m]
        fit = e["fit"]
        recipe = (
            f"{fit['backend']}"
            + (f", preset {fit['preset']}" if fit.get("preset") else "")
            + (
                f", {fit['optimizer']} lr {fit['lr']:g}, batch {fit['batch_size']}, "
                f"{fit['epochs']} epochs"
                if fit["backend"] == "torch"
                else f", {fit['max_iter']} iterations at most"
            )
            + f", constraint {fit['constraint']}"
            + (", standardised features" if fit.get("standardize") else "")
            + (f", scores clamped at {fit['score_clamp']:g}" if fit.get("score_clamp") else "")
        )
        dyn_m = e["dynamics"]
        dyn_text = (
            f"DESIGN eq. 1 (norm {dyn_m['norm']}, gamma = {dyn_m['gamma']:g}, {dyn_m['update']})"
            if dyn_m["preset"] == "design"
            else "the published notebook's (features standardised across tokens, scores clamped "
            "at 20, x <- x + h/2, tokens divided by the mean token norm)"
        )
        lines.append(
            f"- **{m}**: embedding scale {e['embedding']['scale']}; fit {recipe}: "
            f"L = {_fmt(a.get('fit_loss', math.nan))} (from "
            f"{_fmt(a.get('fit_initial_loss', math.nan))}), {a.get('fit_n_steps')} steps in "
            f"{_fmt(a.get('fit_wall_time', math.nan), 1)} s on {a.get('fit_device')}; "
            f"dynamics {dyn_text}, T = {dyn_m['steps']}"
        )
    lines += ["", "## The numbers", "", "| | " + " | ".join(models) + " |"]
    lines.append("|---|" + "---|" * len(models))
    for task, title in TASK_TITLES.items():
        for k, (label, cell) in enumerate(_NUMBER_ROWS):
            if label.startswith("masked pixels") and task != "masked":
                continue
            if label.startswith("best t") and task == "masked":  # the paper counts from t = 1
                label = "best t (t >= 1) and its error"
            cells = [cell(summaries[m][task]) if task in summaries[m] else "n/a" for m in models]
            lines.append(_row(f"**{title}**: {label}" if k == 0 else label, cells))
    lines += ["", *_reference_lines(models, summaries)]
    lines += ["", "## The paper's claims, as stated", ""]
    lines += [
        "Verdicts follow fixed rules (`spinsa.experiments.reproduce.assess_claims`) that "
        "compare each model with itself, not with the references above; a claim holds when "
        "all its conditions are met, partly when some are. A rise or fall counts when it "
        "exceeds 3 combined standard errors. Masked: best t (t >= 1) is 1 or 2, below the "
        "masked input, and the error rises after it. Denoising: the error falls below the "
        "noisy input's, rises after its minimum, and the minimum is within a factor of three "
        "of the paper's ten iterations (3 <= t <= 30). Late states: the final images "
        "correlate >= 0.9 on average with their own mean (one attractor) and >= 0.5 with the "
        "mean training image.",
        "",
        "| claim | model | verdict | evidence |",
        "|---|---|---|---|",
    ]
    for claim, model, verdict, why in assess_claims(summaries):
        lines.append(f"| {claim} | {model} | **{verdict}** | {why} |")
    for m in models:
        if f"models/{m}/notebook" in info.groups:
            nb, attrs = read_tree(h5_path, f"models/{m}/notebook")
            lines += ["", *_notebook_lines(m, nb, attrs, exp[m]["data"])]
    if baselines is not None:
        lines += ["", *_baselines.baseline_report_lines(baselines, h5_path, summaries)]
    if figures:
        lines += ["", "## Figures", ""]
        lines += [f"![{Path(f).stem}]({f})" for f in figures]
    if stage_times:
        lines += ["", "## Wall time of the stages", "", "| stage | seconds |", "|---|---|"]
        lines += [
            f"| {k} | {_fmt(float(v), 1)} |"
            for k, v in stage_times.items()
            if isinstance(v, (int, float))
        ]
        total = sum(float(v) for v in stage_times.values() if np.isfinite(float(v)))
        lines += [
            f"| total | {_fmt(total, 1)} ({total / 60:.1f} min) |",
            "",
            "(stages of an earlier, interrupted run report the time they took then; "
            "fits and evaluations report their own compute time)",
        ]
    lines.append("")
    atomic_write_text(out_path, "\n".join(lines))
    return out_path
