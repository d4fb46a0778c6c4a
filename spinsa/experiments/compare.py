"""Several run files side by side: what ``spinsa compare A.h5 B.h5 ...`` does.

:func:`compare_runs` reads K >= 2 run files fitted on the same data and embedding, loads
their training and test spins once, runs every comparison of :mod:`spinsa.analysis.compare`
and writes, in ``out_dir``::

    compare.h5          kind "comparison"; every result under /analysis/<name> (read it
                        back with spinsa.analysis.load_analysis(path, name))
    report.md           the tables and plain statements
    *.png               one figure per quantity (spinsa.plotting.compare)

The results and what they are computed on:

``cosines``, ``spectra``, ``distance``
    The couplings alone (distances between patch centres, in pixels).
``entropy/test``, ``entropy/train``
    Attention entropy on ``n_data`` clean test images at λ_eval (the attention of eq. 1
    on the raw spins), and on ``n_data`` training images at λ_train, as the fit saw them.
``pseudolikelihood/train``, ``pseudolikelihood/test``
    The fit's objective at λ_train on ``n_data`` training and test images (standardised
    and with the clamp of the runs' fits when they share those settings).
``tasks/masked``, ``tasks/denoise``
    From the evaluations stored in the run files (nothing is iterated again).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import analysis, io
from spinsa._checks import check_count
from spinsa._config import config_differences, flatten
from spinsa._files import check_writable, refuse_existing
from spinsa.damico import standardize_features
from spinsa.experiments.pipeline import RUN_KIND, load_images, read_run
from spinsa.experiments.stages import Pipeline
from spinsa.io.results import COMPARE_KIND, read_evaluation
from spinsa.report import write_compare_report
from spinsa.tasks import TASKS

__all__ = ["COMPARE_KIND", "ComparisonResult", "compare_runs"]
H5_NAME = "compare.h5"
REPORT_NAME = "report.md"
N_DATA = 1000
# Keys of the [data] section that may differ: the test set's size changes no fit.
FREE_DATA_KEYS = ("data.n_test",)


@dataclass(frozen=True)
class ComparisonResult:
    """What :func:`compare_runs` wrote: the directory, ``compare.h5``, ``report.md`` and the
    figures, and the models' labels (``names``) in the order of the run files."""

    out_dir: Path
    h5: Path
    report: Path
    figures: tuple[Path, ...]
    names: tuple[str, ...]


# ---------------------------------------------------------------------------- inputs
def _labels(infos) -> tuple[str, ...]:
    """Each run file's ``name`` attribute (its stem without one), made unique."""
    raw = [str(i.attrs.get("name") or i.path.stem) for i in infos]
    out: list[str] = []
    for name in raw:
        label, n = name, 1
        while label in out:
            n += 1
            label = f"{name}-{n}"
        out.append(label)
    return tuple(out)


def _check_same_data(paths, configs, infos) -> None:
    """Refuse runs whose couplings live on different spins: another data set, embedding
    or shape of J (only ``data.n_test`` may differ)."""
    shape = infos[0].datasets["J"][0]
    first_d = configs[0].make_embedding().d
    for path, config, info in zip(paths[1:], configs[1:], infos[1:], strict=True):
        differences = config_differences(config.to_dict(), configs[0].to_dict())
        if config.make_embedding().d == first_d:  # d = None is the default d: the same spins
            differences.pop("embedding.d", None)
        for key, (here, there) in differences.items():
            if key.startswith(("data.", "embedding.")) and key not in FREE_DATA_KEYS:
                here, there = ("the default" if v is None else repr(v) for v in (here, there))
                raise ValueError(
                    f"{path} differs from {paths[0]} in {key} ({here} vs {there}): its "
                    "couplings act on other spins; compare runs trained with the same [data] "
                    "and [embedding] sections (only data.n_test may differ)"
                )
        if info.datasets["J"][0] != shape:
            raise ValueError(
                f"{path} has couplings of shape {info.datasets['J'][0]}, {paths[0]} of shape "
                f"{shape}; compare runs with the same tokens N and spin dimension d"
            )


def _differing(configs, names) -> dict[str, list]:
    """``key -> one value per model`` for the config keys where the runs differ."""
    # every field, also the options a fit's stored config leaves out at their defaults
    flats = [
        {**flatten(c.to_dict()), **flatten({"fit": dataclasses.asdict(c.fit)})} for c in configs
    ]
    keys = sorted(set().union(*flats) - {"name"})
    return {k: [f.get(k) for f in flats] for k in keys if len({repr(f.get(k)) for f in flats}) > 1}


def _evaluation(path: Path, task: str) -> dict:
    """A run file's evaluation of ``task``: in the file, or for ``spinsa reproduce``'s
    ``fit-<model>.h5`` in its sibling ``eval-<model>-<task>.h5``."""
    try:
        return read_evaluation(path, task)[0]
    except KeyError:
        sibling = path.with_name(f"eval-{path.stem.removeprefix('fit-')}-{task}.h5")
        if not (path.stem.startswith("fit-") and sibling.exists()):
            raise
        return read_evaluation(sibling, task)[0]


def _subsample(n_total: int, n: int) -> np.ndarray:
    """``n`` evenly spaced indices of ``n_total`` (all of them if fewer)."""
    return np.unique(np.linspace(0, n_total - 1, min(n, n_total)).astype(np.int64))


# ---------------------------------------------------------------------------- driver
def compare_runs(
    paths: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    n_data: int = N_DATA,
    overwrite: bool = False,
    progress: bool = False,
) -> ComparisonResult:
    """Compare the couplings and evaluations of K >= 2 run files on the same data.

    Parameters
    ----------
    paths : sequence of str or PathLike
        Run files (``kind = "experiment"``, from ``spinsa train``, :func:`run_experiment`
        or ``spinsa reproduce``'s ``fit-<model>.h5``, whose evaluations are read from the
        ``eval-<model>-<task>.h5`` beside it), fitted on the same data and embedding.
    out_dir : str or PathLike
        Directory of ``compare.h5``, ``report.md`` and the figures (created if needed).
    n_data : int
        Training and test images on which the attention entropy and the pseudo-likelihood
        are measured: evenly spaced training images, and the run's first test images.
    overwrite : bool
        Replace an earlier comparison in ``out_dir`` (default: refuse before any work).
    progress : bool

    Returns
    -------
    ComparisonResult
    """
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(
            f"a comparison needs at least two run files, got {len(paths)}: "
            "spinsa compare A.h5 B.h5 [C.h5 ...] -o OUT_DIR"
        )
    n_data = check_count(n_data, "n_data", 2)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file; give a directory for the comparison (-o)")
    h5, report = out / H5_NAME, out / REPORT_NAME
    for path in (h5, report) if not overwrite else ():
        refuse_existing(path, "overwrite=True (spinsa compare --overwrite)")
    if report.exists() and not h5.exists():  # --overwrite replaces a comparison's only
        raise FileExistsError(
            f"{report} is not a comparison's report (there is no {H5_NAME} beside it): "
            "another command wrote it, and --overwrite replaces only spinsa compare's own "
            "files; choose another directory (-o)"
        )
    infos, configs = zip(*(read_run(p, (RUN_KIND,), couplings=True) for p in paths), strict=True)
    _check_same_data(paths, configs, infos)
    names = _labels(infos)
    out.mkdir(parents=True, exist_ok=True)
    check_writable(h5, overwrite=True)  # a read-only directory before the work, not after
    run = _Comparison(paths, infos, configs, names, n_data, out)
    plan = Pipeline("spinsa compare", say=print if progress else None)
    plan.add("data", run.data)
    plan.add("cosines", lambda: run.add("cosines", analysis.pairwise_cosines(run.Js, names)))
    plan.add("spectra", lambda: run.add("spectra", analysis.coupling_spectra(run.Js, names)))
    plan.add("distance", run.distance)
    plan.add("entropy", run.entropy)
    plan.add("pseudolikelihood", run.pseudolikelihood)
    plan.add("tasks", run.tasks)
    plan.add("write", lambda: run.write(h5, dict(plan.measured)))
    plan.add("figures", lambda: run.figures.extend(_plot(h5, out)))
    plan.add("report", lambda: write_compare_report(h5, report, [f.name for f in run.figures]))
    plan.run()
    figures = run.figures
    return ComparisonResult(out, h5, report, tuple(figures), names)


def _plot(h5: Path, out: Path) -> list[Path]:
    from spinsa.plotting.compare import plot_comparison  # matplotlib on first use

    return plot_comparison(h5, out)


class _Comparison:
    """The runs side by side: their common settings, the results as the stages add them."""

    def __init__(self, paths, infos, configs, names, n_data: int, out: Path):
        self.paths, self.infos, self.configs, self.names = paths, infos, configs, names
        self.n_data, self.out = n_data, out
        self.results: dict[str, tuple[analysis.AnalysisResult, dict[str, Any]]] = {}
        self.notes: list[str] = []
        self.missing: dict[str, list[str]] = {}
        self.figures: list[Path] = []
        self.spins: dict[str, np.ndarray] = {}
        fits = [c.fit for c in configs]
        common = self.common
        self.lam_train = float(common([f.lam for f in fits], "λ_train (fit.lam)"))
        self.standardize = bool(common([f.standardize for f in fits], "fit.standardize"))
        self.clamp = common([f.score_clamp for f in fits], "fit.score_clamp")
        lam_eval = [c.dynamics.lam_eval for c in configs]
        self.lam_eval = float(common(lam_eval, "λ_eval (dynamics.lam_eval)"))
        notebook = [n for n, c in zip(names, configs, strict=True) if c.dynamics.preset != "design"]
        if notebook:
            self.notes.append(
                f"{', '.join(notebook)} iterate(s) the published notebook's dynamics "
                "(standardised features, clamped scores); the entropy on test images is that of "
                "eq. 1's attention on the raw spins."
            )
        n_test = min(min(c.data.n_test for c in configs), n_data)
        self.config = configs[0].with_overrides({"data.n_test": n_test})
        self.emb = self.config.make_embedding()
        self.features = "standardised spins" if self.standardize else "raw spins"
        self.Js = [io.read_array(p, "J") for p in paths]

    def common(self, values, what: str) -> Any:
        """The runs' common value of a setting, or the first run's with a note saying so."""
        if len({repr(v) for v in values}) > 1:
            pairs = ", ".join(f"{n}: {v!r}" for n, v in zip(self.names, values, strict=True))
            self.notes.append(
                f"The runs differ in {what} ({pairs}); the comparison uses {values[0]!r}."
            )
        return values[0]

    def seen(self, x: np.ndarray) -> np.ndarray:
        """The spins as the fits saw them (standardised when the fits standardised)."""
        return standardize_features(x) if self.standardize else x

    def add(self, name: str, result, extra: dict | None = None) -> None:
        self.results[name] = (result, extra or {})

    def data(self) -> None:
        images = load_images(self.config)
        rows = _subsample(images.train.shape[0], self.n_data)
        self.spins = {
            "train": self.emb.encode(images.train[rows]),
            "test": self.emb.encode(images.test),
        }

    def distance(self) -> None:
        positions = self.emb.token_positions("center")
        result = analysis.distance_dependence(
            self.Js, positions, self.names, grid_shape=self.emb.grid_shape
        )
        self.add("distance", result, {"distance_unit": "pixels"})

    def entropy(self) -> None:
        on_test = {"data": "test images", "features": "raw spins", "lam_is": "lam_eval"}
        result = analysis.attention_entropy(self.spins["test"], self.Js, self.lam_eval, self.names)
        self.add("entropy/test", result, on_test)
        on_train = {"data": "training images", "features": self.features, "lam_is": "lam_train"}
        x = self.seen(self.spins["train"])
        self.add(
            "entropy/train",
            analysis.attention_entropy(x, self.Js, self.lam_train, self.names),
            on_train,
        )

    def pseudolikelihood(self) -> None:
        for split in ("train", "test"):
            result = analysis.pseudolikelihood_values(
                self.seen(self.spins[split]), self.Js, self.lam_train, self.names,
                score_clamp=self.clamp,
            )  # fmt: skip
            data = "training images" if split == "train" else "test images"
            self.add(f"pseudolikelihood/{split}", result, {"data": data, "features": self.features})

    def tasks(self) -> None:
        configs, names = self.configs, self.names
        same_inputs = len({c.data.n_test for c in configs}) == 1 and not any(
            k.startswith("tasks.") for k in _differing(configs, names)
        )
        for task in TASKS:
            evaluations, lacking = [], []
            for path, name in zip(self.paths, names, strict=True):
                try:
                    evaluations.append(_evaluation(path, task))
                except KeyError:
                    lacking.append(name)
            if lacking:
                self.missing[task] = lacking
                continue
            result = analysis.compare_tasks(task, evaluations, names, paired=same_inputs)
            self.add(f"tasks/{task}", result, {"paired": bool(same_inputs)})

    def write(self, h5: Path, stage_seconds: dict[str, float]) -> None:
        """``compare.h5``: every result under /analysis, the runs and settings as attributes."""
        names, emb = self.names, self.emb
        runs = {
            name: {
                "file": str(path),
                **{k: info.attrs.get(k) for k in ("fit_loss", "fit_norm", "hebbian_cosine")},
            }
            for name, path, info in zip(names, self.paths, self.infos, strict=True)
        }
        attrs = {
            "models": list(names),
            "run_files": [str(p) for p in self.paths],
            "runs": runs,
            "n_data": int(self.n_data),
            "n_train_used": int(self.spins["train"].shape[0]),
            "n_test_used": int(self.spins["test"].shape[0]),
            "dataset": self.config.data.dataset,
            "n_tokens": int(emb.n_tokens),
            "d": int(emb.d),
            "grid_shape": list(emb.grid_shape),
            "lam_train": self.lam_train,
            "lam_eval": self.lam_eval,
            "standardize": self.standardize,
            "score_clamp": self.clamp,
            "differing": _differing(self.configs, names),
            "missing_tasks": self.missing,
            "notes": self.notes,
            "stage_seconds": stage_seconds,
        }
        results = self.results
        arrays = {f"analysis/{n}": r.to_arrays() for n, (r, _) in results.items()}
        group_attrs = {f"analysis/{n}": {**r.attrs(), **extra} for n, (r, extra) in results.items()}
        io.write_file(h5, arrays, attrs, kind=COMPARE_KIND, group_attrs=group_attrs, overwrite=True)
