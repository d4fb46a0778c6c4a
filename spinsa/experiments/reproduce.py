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

import dataclasses
import importlib.util
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._files import TEMP_GLOB
from spinsa.experiments import baselines as _baselines
from spinsa.experiments import pipeline
from spinsa.experiments.config import ExperimentConfig, ReproduceConfig
from spinsa.experiments.notebook import NOTEBOOK_KIND, notebook_check
from spinsa.experiments.stages import Pipeline, stage_done
from spinsa.io.results import REPRODUCE_KIND, read_tree
from spinsa.io.schema import RESERVED_KEYS, RESERVED_PREFIXES
from spinsa.report import write_reproduce_report
from spinsa.tasks import TASKS

__all__ = [
    "FinishedRunError",
    "ReproduceResult",
    "reproduce",
    "estimate_seconds",
]

H5_NAME = "reproduce.h5"
REPORT_NAME = "report.md"
ERRORS_FIGURE = "fig1_errors.png"
VALIDATION_FIGURE = "baselines_validation.png"  # the baselines' validation curves
DATA_KIND = "reproduce-data"


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
def _stage_files(out_dir: Path) -> list[Path]:
    patterns = ["data.h5", "fit-*.h5", "eval-*.h5", "notebook-*.h5", H5_NAME, "fig1_*.png"]
    patterns += [REPORT_NAME, _baselines.BASELINES_NAME, "baseline-*.pt", "fig2_*.png", "*.corrupt"]
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

    Parameters
    ----------
    cfg : ReproduceConfig
        The reproduction: its experiments' sizes, fits and dynamics.
    bl_spec : BaselinesSpec, optional
        The baselines stage, when it runs (None: no ``baselines`` entry).
    cuda : bool
        Whether a CUDA device is present (baselines on it are estimated as NaN).

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
        out["baselines"] = _baselines_seconds(cfg, bl_spec, cuda)
    return out


def _baselines_seconds(cfg: ReproduceConfig, spec, cuda: bool) -> float:
    """The most seconds the baselines stage takes: every training to its cap, ``workers`` at
    a time, then the evaluations."""
    n_all = cfg.base.data.n_train_images or 60_000
    n_test = cfg.base.data.n_test
    jobs = [(bc, len(TASKS), spec.n_train or n_all) for bc in spec.configs().values()]
    jobs += [
        (bc, 1, spec.patch_study_n_train or spec.n_train or n_all)
        for bc in spec.patch_models().values()
    ]
    training = evaluation = 0.0
    n_trainings = sum(n_tasks for _, n_tasks, _ in jobs)
    for bc, n_tasks, n in jobs:
        if cuda and bc.device in ("auto", "cuda"):
            return math.nan  # not measured here
        training += n_tasks * _baselines._training_seconds(bc, n)
        evaluation += (
            n_tasks * n_test * spec.T * _COST["baseline_eval"] * (bc.n_tokens / 49) ** 1.25
        )
    return training / min(spec.workers, n_trainings) + evaluation


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
    device: str | None = None,
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
    baselines : bool, {"quick", "cpu", "paper", "none"} or BaselinesSpec
        Train and compare the backprop baselines (recycled block and ViT, stage
        ``baselines``), each until the stopping rule holds (docs/convergence.md); the
        recipes are those of :meth:`~spinsa.experiments.baselines.BaselinesSpec.for_run`:
        ``"quick"``, width 32 on 3,000 images (minutes); ``"cpu"``, the CPU recipe chosen by
        measurement (width 64 on 20,000 images, and the block on 2x2 patches; about 2
        hours on 2 cores); ``"paper"``, the paper's 100-epoch recipe (width 128, meant for
        a GPU). True: ``"cpu"`` for a paper-size run, ``"quick"`` for a ``config`` with
        ``quick`` (a configured run counts as quick unless ``quick=False``, as the command
        line passes); the quick run of the paper's configuration leaves them out and says
        how to run them. Skipped with a note when torch is not installed. A
        :class:`~spinsa.experiments.baselines.BaselinesSpec` for another recipe; False or
        ``"none"`` to skip them.
    device : str, optional
        Where the dynamics of the evaluations runs (``dynamics.device`` of every model:
        ``"numba"``, ``"cpu"``, ``"cuda"``, ``"cuda:<k>"``, ``"auto"``); default: the
        config's. Finished stages count as done whatever device computed them.

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
    if device is not None:
        base = cfg.base.with_overrides({"dynamics.device": device})
        cfg = dataclasses.replace(cfg, base=base)
    cfg.experiments()  # a bad model section is refused before anything is written
    bl_spec = _resolve_baselines(baselines, cfg, quick, config is not None, say)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / REPORT_NAME).is_file() and not overwrite and stage_done(out_dir / H5_NAME):
        raise FinishedRunError(
            f"{out_dir} already holds a finished run ({REPORT_NAME}, {H5_NAME}); pass "
            "overwrite=True (--overwrite) to run it again, or choose another output directory"
        )
    if overwrite:
        for path in _stage_files(out_dir):
            path.unlink()
    for path in out_dir.glob(TEMP_GLOB):  # left by a writer killed outright (one run a dir)
        path.unlink(missing_ok=True)

    run = _Reproduction(cfg, out_dir, bl_spec, quick=quick, progress=progress, fetch=fetch, say=say)
    run.command = _command(out_dir, quick, config, baselines)
    plan = run.plan(Pipeline("spinsa reproduce", say=say))
    size = "configured" if config is not None else ("quick" if quick else "paper-size")
    plan.say_plan(f"{len(run.experiments)} model(s), {size} run in {out_dir}")
    if any(s.name == "baselines" and s.estimate > 4 * 3600 for s in plan.stages):
        say(
            "  these baselines take many hours on a CPU; --baselines cpu trains the CPU recipe "
            "to convergence, or run this on a GPU"
        )
    plan.run()
    plan.say_times()
    say(f"spinsa reproduce: report: {run.report_path}")
    return ReproduceResult(out_dir, run.h5, run.report_path, tuple(run.figures), plan.measured)


class _Reproduction:
    """The stages of one reproduce run (:meth:`plan`) and what each of them does."""

    def __init__(
        self, cfg: ReproduceConfig, out_dir: Path, bl_spec, *, quick, progress, fetch, say
    ):
        self.cfg, self.out_dir, self.bl_spec = cfg, out_dir, bl_spec
        self.quick, self.progress, self.fetch, self.say = quick, progress, fetch, say
        self.experiments = cfg.experiments()
        self.notebook_models = [n for n, e in self.experiments.items() if _has_notebook_check(e)]
        self.h5 = out_dir / H5_NAME
        self.report_path = out_dir / REPORT_NAME
        self.bl_path = out_dir / _baselines.BASELINES_NAME if bl_spec is not None else None
        self.figures = self._figures()
        self._images: dict[Any, pipeline.Images] = {}
        self.timings: dict[str, float] = {}  # the pipeline's measured times, once planned
        self.command: str | None = None  # what the report names as the command that wrote it

    def file_of(self, stage: str) -> Path:
        """The file of a stage: ``"eval:x:masked"`` -> ``eval-x-masked.h5``."""
        return self.out_dir / (stage.replace(":", "-") + ".h5")

    def images_for(self, exp: ExperimentConfig) -> pipeline.Images:
        if exp.data not in self._images:
            self._images[exp.data] = pipeline.load_images(exp, fetch=self.fetch)
        return self._images[exp.data]

    def plan(self, plan: Pipeline) -> Pipeline:
        """Add every stage to ``plan``, in order, with its estimate; returns ``plan``."""
        cuda = _cuda_available() if self.bl_spec is not None else False
        estimates = estimate_seconds(self.cfg, self.bl_spec, cuda=cuda)
        self.timings = plan.measured  # filled as the stages run: assemble and report state them

        def add(name, run, deps=(), config=None, output=None, files=()):
            output = output or (self.file_of(name) if config is not None else None)
            plan.add(
                name, run, output=output, config=config, files=tuple(files), deps=tuple(deps),
                estimate=estimates.get(name, math.nan),
            )  # fmt: skip

        add("data", self.data, config={"data": self.cfg.base.to_dict()["data"]})
        for name, exp in self.experiments.items():
            add(f"fit:{name}", lambda e=exp: self.fit(e), ["data"], exp.to_dict())
        for name, exp in self.experiments.items():
            for task in TASKS:
                run = lambda e=exp, t=task: self.evaluate(e, t)  # noqa: E731
                add(f"eval:{name}:{task}", run, [f"fit:{name}"], exp.to_dict())
        for name in self.notebook_models:
            exp = self.experiments[name]
            add(f"notebook:{name}", lambda e=exp: self.notebook(e), [f"fit:{name}"], exp.to_dict())
        earlier = [s.name for s in plan.stages if s.name.startswith(("eval:", "notebook:"))]
        add("assemble", self.assemble, ["data", *earlier], self.cfg.to_dict(), output=self.h5)
        figure_deps = ["assemble"]
        if self.bl_spec is not None:
            config = _baselines.stage_config(self.cfg, self.bl_spec)
            add("baselines", self.baselines, ["assemble"], config, output=self.bl_path)
            figure_deps.append("baselines")
        add("figures", self.draw, figure_deps, files=self.figures)
        add("report", self.report, [*figure_deps, "figures"], files=[self.report_path])
        return plan

    def data(self) -> None:
        """``data.h5``: the mean training image and the label counts (loads the images)."""
        base = self.cfg.base
        imgs = self.images_for(base)
        for exp in self.experiments.values():
            self.images_for(exp)
        arrays = {
            "mean_train_image": imgs.train.mean(axis=0, dtype=np.float64),
            "train_label_counts": np.bincount(imgs.train_labels, minlength=10),
            "test_label_counts": np.bincount(imgs.test_labels, minlength=10),
        }
        attrs = {
            "n_train": int(imgs.train.shape[0]),
            "n_test": int(imgs.test.shape[0]),
            "dataset": base.data.dataset,
        }
        io.write_file(
            self.file_of("data"), arrays, attrs, kind=DATA_KIND,
            config={"data": base.to_dict()["data"]}, seeds={"data": base.data.seed},
            overwrite=True,
        )  # fmt: skip

    def fit(self, exp: ExperimentConfig) -> None:
        pipeline.train(
            exp, self.file_of(f"fit:{exp.name}"), overwrite=True,
            checkpoint=self.out_dir / f"fit-{exp.name}.ckpt.h5", progress=self.progress,
            images=self.images_for(exp),
        )  # fmt: skip

    def evaluate(self, exp: ExperimentConfig, task: str) -> None:
        pipeline.evaluate(
            self.file_of(f"fit:{exp.name}"), task, out=self.file_of(f"eval:{exp.name}:{task}"),
            overwrite=True, progress=self.progress, images=self.images_for(exp),
            device=exp.dynamics.device,  # this run's, not what the fit file stored
        )  # fmt: skip

    def notebook(self, exp: ExperimentConfig) -> None:
        """The published notebook's two printed measurements, on this fit."""
        fpath = self.file_of(f"fit:{exp.name}")
        arrays, attrs = notebook_check(
            exp, io.read_array(fpath, "J"), self.images_for(exp),
            io.read_array(fpath, "fit/history/step_loss"), exp.fit.epochs, fetch=self.fetch,
        )  # fmt: skip
        io.write_file(
            self.file_of(f"notebook:{exp.name}"), arrays, attrs, kind=NOTEBOOK_KIND, config=exp,
            seeds={"tasks": exp.tasks.seed}, overwrite=True,
        )  # fmt: skip

    def assemble(self) -> None:
        _assemble(self.h5, self.cfg, self.experiments, self.file_of, self.quick, self.timings)

    def baselines(self) -> None:
        _baselines.run_baselines(
            self.bl_path, self.cfg, self.bl_spec, self.images_for(self.cfg.base), self.h5,
            progress=self.progress, log=self.say,
        )  # fmt: skip

    def _figures(self) -> dict[Path, Callable]:
        """File -> how to draw it (plotting is imported when the stage runs)."""
        h5, bl, out = self.h5, self.bl_path, self.out_dir
        figures = {out / ERRORS_FIGURE: lambda p: p.figure_errors(h5, baselines=bl)}
        for n in self.experiments:
            figures[out / f"fig1_examples_{n}.png"] = lambda p, n=n: p.figure_examples(h5, model=n)
        for n in self.notebook_models:
            path = out / f"fig1_notebook_{n}.png"
            figures[path] = lambda p, n=n: p.figure_notebook_view(h5, model=n)
        if bl is not None:
            figures[out / "fig2_patch_variances.png"] = lambda p: p.figure_patch_variances(bl)
            figures[out / VALIDATION_FIGURE] = lambda p: p.figure_validation_curves(bl)
        return figures

    def draw(self) -> None:
        from spinsa import plotting

        for path, draw in self.figures.items():
            plotting.save_figure(draw(plotting), path)

    def report(self) -> None:
        later = ("assemble", "baselines", "figures")  # stages whose times the file lacks
        write_reproduce_report(
            self.h5, self.report_path, figures=[p.name for p in self.figures],
            timings={k: v for k, v in self.timings.items() if k in later},
            baselines=self.bl_path, command=self.command,
        )  # fmt: skip


def _command(out_dir: Path, quick: bool, config, baselines) -> str:
    """The ``spinsa reproduce`` command line equivalent to a call of :func:`reproduce`."""
    words = ["spinsa reproduce"]
    if isinstance(config, ReproduceConfig):
        words.append("--config <a ReproduceConfig from Python>")
    elif config is not None:
        words.append(f"--config {config}")
    elif quick:
        words.append("--quick")
    if isinstance(baselines, _baselines.BaselinesSpec):
        words.append("--baselines <a BaselinesSpec from Python>")
    elif baselines is False or baselines is None:
        words.append("--baselines none")
    elif baselines is not True:
        words.append(f"--baselines {baselines}")
    return " ".join([*words, f"--out {out_dir}"])


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _resolve_baselines(baselines, cfg: ReproduceConfig, quick: bool, configured: bool, say):
    """The BaselinesSpec of the run, or None to skip the baselines."""
    if baselines is False or baselines is None or baselines == "none":
        return None
    if isinstance(baselines, _baselines.BaselinesSpec):
        return baselines
    if baselines is True and quick and not configured:
        say(
            "spinsa reproduce: a quick run leaves the backprop baselines out; `spinsa reproduce "
            "--quick --baselines quick` trains them on 3,000 images until the stopping rule "
            "holds (about 5 more minutes on 2 cores), and the paper-size run trains the CPU "
            "recipe (docs/convergence.md)"
        )
        return None
    if baselines is True:
        baselines = "quick" if quick else "cpu"
    if baselines not in _baselines.BASELINE_RECIPES:
        raise ValueError(
            "baselines must be True, False, 'quick', 'cpu', 'paper', 'none' or a BaselinesSpec, "
            f"got {baselines!r}"
        )
    if importlib.util.find_spec("torch") is None:
        say(
            "spinsa reproduce: torch is not installed, the baselines are skipped (pip install "
            '"spinsa[torch]", or pass --baselines none to silence this)'
        )
        return None
    return _baselines.BaselinesSpec.for_run(cfg, baselines)


_FIT_ATTRS = ("n_train", "hebbian_cosine")  # besides fit_*: what reproduce.h5 keeps of a fit


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
        attrs = {k: v for k, v in root.items() if k.startswith("fit_") or k in _FIT_ATTRS}
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
