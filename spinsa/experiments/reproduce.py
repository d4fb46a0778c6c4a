"""``spinsa reproduce``: the paper's bare-self-attention experiment end to end, resumable.

Stages, each writing its own file atomically into the output directory:

==================  ===============================  =======================================
stage               file                             what
==================  ===============================  =======================================
data                ``data.h5``                      load (fetch on first use) the images
fit:<model>         ``fit-<model>.h5``               fit the couplings (checkpointed)
eval:<model>:<task> ``eval-<model>-<task>.h5``       dynamics on the test set, errors at every t
assemble            ``reproduce.h5``                 everything above in one self-describing file
baselines           ``baselines.h5``                 recycled block and ViT trained by
                                                     backprop, their errors, patch variances
figures             ``fig1_errors.png``,             error vs t with standard-error bands;
                    ``fig1_examples_<model>.png``,   decoded examples at t = 0, 1, 5, 20, 100;
                    ``fig2_patch_variances.png``     masked-patch variances (with baselines)
report              ``report.md``                    the numbers that decide fidelity
==================  ===============================  =======================================

A stage is done when its file exists, is a valid spinsa file and holds the same
configuration; a killed run started again resumes after the last finished stage (and the fit
from its checkpoint). A stage runs again when a stage it depends on ran. A directory with a
finished run (``report.md`` next to a valid ``reproduce.h5``) is refused unless
``overwrite=True``, which deletes the stage files and starts afresh. A partial run with a
different configuration is refused too.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spinsa.experiments.config import ExperimentConfig, ReproduceConfig
from spinsa.experiments.pipeline import TASKS

__all__ = ["FinishedRunError", "ReproduceResult", "reproduce", "write_report", "assess_claims"]

H5_NAME = "reproduce.h5"
REPORT_NAME = "report.md"
ERRORS_FIGURE = "fig1_errors.png"
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


@dataclass
class _Stage:
    name: str
    outputs: list[Path]
    run: Callable[[], None]
    deps: list[str]
    is_done: Callable[[], bool]


# ---------------------------------------------------------------------------- helpers
def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _first_difference(a: dict, b: dict) -> str:
    fa, fb = _flat(a), _flat(b)
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key, "<absent>") != fb.get(key, "<absent>"):
            return f"{key} = {fa.get(key, '<absent>')!r} there, {fb.get(key, '<absent>')!r} now"
    return "(no difference found)"


def _canonical(d: dict) -> dict:
    from spinsa.io.schema import to_json

    return json.loads(to_json(d))


def _file_config(path: Path) -> dict | None:
    """The stored config of a stage file, or None when the file is missing or unreadable."""
    from spinsa import io

    if not path.exists():
        return None
    try:
        return io.read(path).config
    except io.SpinsaFileError:
        return None


def _check_same(path: Path, stored: dict, expected: dict, out_dir: Path) -> None:
    if _canonical(stored) != _canonical(expected):
        raise ValueError(
            f"{out_dir} holds a run with a different configuration ({path.name}: "
            f"{_first_difference(_canonical(stored), _canonical(expected))}); pass "
            "overwrite=True (--overwrite) to start afresh, or choose another output directory"
        )


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _is_finished(out_dir: Path) -> bool:
    from spinsa import io

    if not (out_dir / REPORT_NAME).is_file():
        return False
    try:
        io.check_file(out_dir / H5_NAME)
    except io.SpinsaFileError:
        return False
    return True


def _stage_files(out_dir: Path) -> list[Path]:
    patterns = ["data.h5", "fit-*.h5", "eval-*.h5", H5_NAME, "fig1_*.png", REPORT_NAME, ".*.tmp-*"]
    patterns += ["baselines.h5", "baseline-*.pt", "fig2_*.png"]
    found: list[Path] = []
    for pattern in patterns:
        found.extend(p for p in out_dir.glob(pattern) if p.is_file())
    return found


def _log(message: str) -> None:
    print(message, file=sys.stdout, flush=True)


# ---------------------------------------------------------------------------- reproduce
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
        Where the stage lines go (default: stdout); None is silent.
    baselines : bool or BaselinesSpec
        Train and compare the backprop baselines (recycled block and ViT, stage
        ``baselines``): True for :meth:`BaselinesSpec.for_run` (``quick`` picks the brief
        CPU recipe, otherwise the paper's, meant for a GPU; skipped with a note when torch
        is not installed), a :class:`~spinsa.experiments.baselines.BaselinesSpec` for
        another recipe, False to skip them.

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
    from spinsa import io
    from spinsa.experiments import pipeline

    say = log or (lambda message: None)
    cfg = _resolve_config(config, quick)
    experiments = cfg.experiments()
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"{out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    if _is_finished(out_dir) and not overwrite:
        raise FinishedRunError(
            f"{out_dir} already holds a finished run ({REPORT_NAME}, {H5_NAME}); pass "
            "overwrite=True (--overwrite) to run it again, or choose another output directory"
        )
    if overwrite:
        for path in _stage_files(out_dir):
            path.unlink()

    images_cache: dict[Any, pipeline.Images] = {}

    def images_for(exp: ExperimentConfig) -> pipeline.Images:
        key = exp.data
        if key not in images_cache:
            images_cache[key] = pipeline.load_images(exp, fetch=fetch)
        return images_cache[key]

    base = cfg.base
    stages: list[_Stage] = []
    bl_spec = _resolve_baselines(baselines, cfg, quick, say)

    # ---- data
    data_path = out_dir / "data.h5"
    data_expected = {"data": dict(_canonical(base.to_dict())["data"])}

    def run_data():
        imgs = images_for(base)
        for exp in experiments.values():
            images_for(exp)
        io.write_file(
            data_path,
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
            config=data_expected,
            seeds={"data": base.data.seed},
            overwrite=True,
        )

    def done_data():
        stored = _file_config(data_path)
        if stored is None:
            return False
        _check_same(data_path, stored, data_expected, out_dir)
        return True

    stages.append(_Stage("data", [data_path], run_data, [], done_data))

    # ---- fits and evaluations
    def fit_path(name):
        return out_dir / f"fit-{name}.h5"

    def eval_path(name, task):
        return out_dir / f"eval-{name}-{task}.h5"

    def make_done(path: Path, exp: ExperimentConfig):
        def done():
            stored = _file_config(path)
            if stored is None:
                return False
            _check_same(path, stored, exp.to_dict(), out_dir)
            return True

        return done

    for name, exp in experiments.items():
        fpath = fit_path(name)

        def run_fit(exp=exp, fpath=fpath):
            pipeline.train(
                exp,
                fpath,
                overwrite=True,
                checkpoint=out_dir / f"fit-{exp.name}.ckpt.h5",
                progress=progress,
                images=images_for(exp),
            )

        stages.append(_Stage(f"fit:{name}", [fpath], run_fit, ["data"], make_done(fpath, exp)))

    for name, exp in experiments.items():
        for task in TASKS:
            epath = eval_path(name, task)

            def run_eval(exp=exp, task=task, epath=epath):
                pipeline.evaluate(
                    fit_path(exp.name),
                    task,
                    out=epath,
                    overwrite=True,
                    progress=progress,
                    images=images_for(exp),
                )

            stages.append(
                _Stage(
                    f"eval:{name}:{task}", [epath], run_eval, [f"fit:{name}"], make_done(epath, exp)
                )
            )

    # ---- assemble, figures, report
    h5_path = out_dir / H5_NAME
    figures = [out_dir / ERRORS_FIGURE] + [
        out_dir / f"fig1_examples_{name}.png" for name in experiments
    ]
    bl_path = out_dir / "baselines.h5"
    if bl_spec is not None:
        figures.append(out_dir / "fig2_patch_variances.png")
    report_path = out_dir / REPORT_NAME
    timings: dict[str, float] = {}
    eval_names = [s.name for s in stages if s.name.startswith("eval:")]

    def run_assemble():
        _assemble(
            h5_path,
            cfg,
            experiments,
            fit_path,
            eval_path,
            quick=quick and config is None,
            timings=timings,
        )

    def done_assemble():
        stored = _file_config(h5_path)
        if stored is None:
            return False
        _check_same(h5_path, stored, cfg.to_dict(), out_dir)
        return True

    stages.append(_Stage("assemble", [h5_path], run_assemble, ["data", *eval_names], done_assemble))

    figure_deps = ["assemble"]
    if bl_spec is not None:
        from spinsa.experiments.baselines import run_baselines, stage_config

        bl_expected = stage_config(cfg, bl_spec)

        def run_bl():
            run_baselines(
                bl_path, cfg, bl_spec, images_for(base), h5_path, progress=progress, log=say
            )

        def done_bl():
            stored = _file_config(bl_path)
            if stored is None:
                return False
            _check_same(bl_path, stored, bl_expected, out_dir)
            return True

        stages.append(_Stage("baselines", [bl_path], run_bl, ["assemble"], done_bl))
        figure_deps.append("baselines")

    def run_figures():
        from spinsa import plotting

        with_bl = bl_path if bl_spec is not None else None
        plotting.save_figure(plotting.figure_errors(h5_path, baselines=with_bl), figures[0])
        for name, path in zip(experiments, figures[1 : 1 + len(experiments)], strict=True):
            plotting.save_figure(plotting.figure_examples(h5_path, model=name), path)
        if with_bl is not None:
            plotting.save_figure(plotting.figure_patch_variances(with_bl), figures[-1])

    stages.append(
        _Stage(
            "figures", figures, run_figures, figure_deps, lambda: all(p.is_file() for p in figures)
        )
    )

    def run_report():
        write_report(
            h5_path,
            report_path,
            figures=[p.name for p in figures],
            timings={k: v for k, v in timings.items() if k in ("assemble", "baselines", "figures")},
            baselines=bl_path if bl_spec is not None else None,
        )

    stages.append(
        _Stage(
            "report",
            [report_path],
            run_report,
            figure_deps + ["figures"],
            lambda: report_path.is_file(),
        )
    )

    # ---- run the stages
    say(
        f"spinsa reproduce: {len(experiments)} model(s) ({', '.join(experiments)}), "
        f"{'quick' if quick and config is None else 'configured'} run in {out_dir}"
    )
    ran: set[str] = set()
    t_all = time.perf_counter()
    for i, stage in enumerate(stages, 1):
        must_run = any(dep in ran for dep in stage.deps) or not stage.is_done()
        label = f"[{i}/{len(stages)}] {stage.name}"
        if not must_run:
            say(f"{label}: done earlier, skipped")
            continue
        say(f"{label} ...")
        t0 = time.perf_counter()
        stage.run()
        dt = time.perf_counter() - t0
        timings[stage.name] = dt
        ran.add(stage.name)
        say(f"{label}: {dt:.1f} s")
    total = time.perf_counter() - t_all
    say(
        f"spinsa reproduce: finished in {total:.1f} s ({total / 60:.1f} min); report: {report_path}"
    )
    return ReproduceResult(
        out_dir=out_dir, h5=h5_path, report=report_path, figures=tuple(figures), timings=timings
    )


def _resolve_baselines(baselines, cfg: ReproduceConfig, quick: bool, say):
    """The BaselinesSpec of the run, or None to skip the baselines."""
    from spinsa.experiments.baselines import BaselinesSpec

    if baselines is False or baselines is None:
        return None
    if isinstance(baselines, BaselinesSpec):
        return baselines
    if baselines is not True:
        raise ValueError(
            f"baselines must be True, False or a BaselinesSpec, got {type(baselines).__name__}"
        )
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        say(
            "spinsa reproduce: torch is not installed, the baselines are skipped (pip install "
            '"spinsa[torch]", or pass --no-baselines to silence this)'
        )
        return None
    return BaselinesSpec.for_run(cfg, quick=quick)


def _assemble(
    h5_path: Path,
    cfg: ReproduceConfig,
    experiments,
    fit_path,
    eval_path,
    *,
    quick: bool,
    timings: dict,
) -> None:
    """Copy the fit and evaluation files of every model into one ``reproduce.h5``."""
    from spinsa import io
    from spinsa.experiments.results import REPRODUCE_KIND, read_tree
    from spinsa.io.schema import GROUP_PROVENANCE_KEYS

    arrays: dict[str, Any] = {}
    group_attrs: dict[str, dict] = {}
    stage_times: dict[str, float] = {}
    for name, exp in experiments.items():
        fpath = fit_path(name)
        info = io.read(fpath)
        fit_tree = {
            "J": io.read_array(fpath, "J"),
            "fit": read_tree(fpath, "fit")[0],
            "data": read_tree(fpath, "data")[0],
        }
        attrs = {k: v for k, v in info.attrs.items() if k.startswith("fit_") or k == "n_train"}
        attrs["experiment_config"] = exp.to_dict()
        stage_times[f"fit:{name}"] = float(info.attrs.get("fit_wall_time", math.nan))
        fit_tree["evaluation"] = {}
        for task in TASKS:
            epath = eval_path(name, task)
            tree, eattrs = read_tree(epath, f"evaluation/{task}")
            fit_tree["evaluation"][task] = tree
            group_attrs[f"models/{name}/evaluation/{task}"] = {
                k: v for k, v in eattrs.items() if k not in GROUP_PROVENANCE_KEYS
            }
            stage_times[f"eval:{name}:{task}"] = float(eattrs.get("wall_time", math.nan))
        arrays[f"models/{name}"] = fit_tree
        group_attrs[f"models/{name}"] = attrs
    stage_times.update({k: v for k, v in timings.items() if k in stage_times or k == "data"})
    io.write_file(
        h5_path,
        arrays,
        {
            "models": list(experiments),
            "quick": bool(quick),
            "stage_times": stage_times,
        },
        kind=REPRODUCE_KIND,
        config=cfg.to_dict(),
        group_attrs=group_attrs,
        overwrite=True,
    )


# ---------------------------------------------------------------------------- report
def _fmt(value: float, digits: int = 4) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _pm(value: float, sem: float, digits: int = 4) -> str:
    if not np.isfinite(value):
        return "n/a"
    if not np.isfinite(sem):
        return _fmt(value, digits)
    return f"{value:.{digits}f} ± {sem:.{digits}f}"


SIGNIFICANT_Z = 3.0  # a change counts when it exceeds 3 combined standard errors
ONE_ATTRACTOR_COHERENCE = 0.9  # final images correlate at least this much with their mean
RESEMBLES_MEAN_DIGIT = 0.5  # correlation with the mean training image that we call "resembles"


def _verdict(conditions: list[bool]) -> str:
    if all(conditions):
        return "holds"
    return "partly" if any(conditions) else "does not hold"


def _relation(gain_z: float) -> str:
    """How the best error compares with the input's, from (input - best) / se."""
    if gain_z > SIGNIFICANT_Z:
        return "below"
    return "above" if gain_z < -SIGNIFICANT_Z else "not significantly different from"


def _rise(z: float) -> str:
    return "rises" if z > SIGNIFICANT_Z else "does not rise significantly"


def assess_claims(summaries: dict[str, dict[str, dict]]) -> list[tuple[str, str, str, str]]:
    """Plain verdicts on the paper's three claims, model by model.

    Each claim is split into conditions; the verdict is ``"holds"`` when all are met,
    ``"does not hold"`` when none is, ``"partly"`` otherwise. A rise or a fall counts when
    it exceeds 3 combined standard errors (:data:`SIGNIFICANT_Z`).

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
            out.append(
                (
                    "masked: lowest after about one iteration, then grows",
                    model,
                    _verdict([early, gain, rises]),
                    f"best t = {m['best_t']}, error {_fmt(m['best_error'])}, "
                    f"{_relation(m['gain_z'])} the masked input's "
                    f"{_fmt(m['error_t0'])} ({_fmt(m['gain_z'], 1)} standard errors); then "
                    f"{_rise(m['rise_z'])} to {_fmt(m['error_T'])} at t = {m['T']} "
                    f"({_fmt(m['rise_z'], 1)} standard errors)",
                )
            )
        d = tasks.get("denoise")
        if d is not None:
            falls = d["gain_z"] > SIGNIFICANT_Z
            rises = d["rise_z"] > SIGNIFICANT_Z
            about_ten = 3 <= d["best_t"] <= 30
            out.append(
                (
                    "denoising: falls for several iterations (paper: about ten), then rises",
                    model,
                    _verdict([falls, rises, about_ten]),
                    f"{'falls' if falls else 'does not fall significantly'} from "
                    f"{_fmt(d['error_t0'])} to {_fmt(d['best_error'])} at best t = "
                    f"{d['best_t']} ({_fmt(d['gain_z'], 1)} standard errors; paper: about 10"
                    f"{'' if about_ten else ', so not within a factor of three'}); then "
                    f"{_rise(d['rise_z'])} to {_fmt(d['error_T'])} at t = {d['T']} "
                    f"({_fmt(d['rise_z'], 1)} standard errors)",
                )
            )
        coh = [tasks[t]["coherence_T"] for t in tasks]
        corr = [tasks[t]["corr_T"] for t in tasks]
        if coh:
            one = all(c >= ONE_ATTRACTOR_COHERENCE for c in coh)
            like = all(c >= RESEMBLES_MEAN_DIGIT for c in corr)
            out.append(
                (
                    "late states: one global attractor that resembles the mean digit",
                    model,
                    _verdict([one, like]),
                    "final images vs their own mean: "
                    + ", ".join(f"{t} {_fmt(tasks[t]['coherence_T'], 3)}" for t in tasks)
                    + "; vs the mean training digit: "
                    + ", ".join(f"{t} {_fmt(tasks[t]['corr_T'], 3)}" for t in tasks),
                )
            )
    return out


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
    from spinsa import io
    from spinsa.experiments.results import model_names, read_summaries, read_tree

    h5_path, out_path = Path(h5_path), Path(out_path)
    info = io.read(h5_path)
    models = model_names(h5_path)
    summaries = {m: read_summaries(h5_path, m) for m in models}
    model_attrs = {m: read_tree(h5_path, f"models/{m}")[1] for m in models}
    exp = {m: model_attrs[m]["experiment_config"] for m in models}
    first = exp[models[0]]
    data, emb, dyn, tasks = first["data"], first["embedding"], first["dynamics"], first["tasks"]
    embedding = ExperimentConfig.from_dict(first).make_embedding()
    n_train = model_attrs[models[0]].get("n_train")
    n_test = next(iter(summaries[models[0]].values()), {}).get("n_test")
    eval_attrs = {}
    for m in models:
        for t in TASKS:
            try:
                eval_attrs[(m, t)] = read_tree(h5_path, f"models/{m}/evaluation/{t}")[1]
            except KeyError:
                pass
    n_test = eval_attrs.get((models[0], "masked"), {}).get("n_test", n_test)
    stage_times = {**(info.attrs.get("stage_times", {}) or {}), **(timings or {})}
    order = ["data"] + [f"fit:{m}" for m in models]
    order += [f"eval:{m}:{t}" for m in models for t in TASKS]
    order += ["assemble", "baselines", "figures"]
    stage_times = {
        k: stage_times[k]
        for k in sorted(stage_times, key=lambda k: order.index(k) if k in order else len(order))
    }

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
        f"- lambda_train = {first['fit']['lam']:g}, lambda_eval = {dyn['lam_eval']:g}, "
        f"T = {dyn['steps']}",
        f"- masked prediction: {tasks['mask_fraction']:.0%} of the tokens set to zero"
        f"{' (visible tokens clamped)' if tasks['clamp_visible'] else ''}; denoising: "
        f"Gaussian noise of variance {tasks['noise_variance']:g}, image statistics restored",
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
            f"dynamics {dyn_text}"
        )
    lines += ["", "## The numbers", ""]
    header = "| | " + " | ".join(models) + " |"
    lines += [header, "|---|" + "---|" * len(models)]

    def row(label, fn):
        cells = []
        for m in models:
            try:
                cells.append(fn(summaries[m]))
            except KeyError:
                cells.append("n/a")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for task, title in (("masked", "masked prediction"), ("denoise", "denoising")):
        row(
            f"**{title}**: error at t = 0 (input)",
            lambda s, task=task: _pm(s[task]["error_t0"], s[task]["sem_t0"]),
        )
        row("error at t = 1", lambda s, task=task: _pm(s[task]["error_t1"], s[task]["sem_t1"]))
        row(
            "best t" + (" (t >= 1)" if task == "masked" else "") + " and its error",
            lambda s, task=task: (
                f"t = {s[task]['best_t']}: " + _pm(s[task]["best_error"], s[task]["best_sem"])
            ),
        )
        row("error at t = T", lambda s, task=task: _pm(s[task]["error_T"], s[task]["sem_T"]))
        if task == "masked":
            row(
                "masked pixels only: t = 0 / best t / T",
                lambda s: " / ".join(
                    _fmt(s["masked"][k])
                    for k in ("masked_error_t0", "masked_error_best", "masked_error_T")
                ),
            )
        row(
            "correlation of the state at t = T with the mean training digit",
            lambda s, task=task: _pm(s[task]["corr_T"], s[task]["corr_T_sem"], 3),
        )
        row(
            "correlation of the final images with their own mean",
            lambda s, task=task: _pm(s[task]["coherence_T"], s[task]["coherence_T_sem"], 3),
        )
        row(
            "mean token change in the last step",
            lambda s, task=task: f"{s[task]['step_change_T']:.2e}",
        )
    lines += ["", "## The paper's claims", ""]
    lines += [
        "Verdicts follow fixed rules (`spinsa.experiments.reproduce.assess_claims`); a claim "
        "holds when all its conditions are met, partly when some are. A rise or fall counts "
        "when it exceeds 3 combined standard errors. Masked: best t (t >= 1) is 1 or 2, below "
        "the masked input, and the error rises after it. Denoising: the error falls below the "
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
    if baselines is not None:
        from spinsa.experiments.baselines import baseline_report_lines

        lines += ["", *baseline_report_lines(baselines, h5_path)]
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
    _atomic_text(out_path, "\n".join(lines))
    return out_path
