"""Configuration of an experiment: data, embedding, fit, dynamics and tasks, in one frozen object.

An :class:`ExperimentConfig` describes one model end to end and is written in full into
every file the pipeline produces. In TOML each section is a table of its class's fields
(``[fit]`` takes any field of :class:`spinsa.fit.FitConfig`)::

    name = "design"
    [data]
    dataset = "mnist"        # "mnist", "fashion-mnist" or "synthetic"
    per_class = 1000         # or n_train = 10000
    [embedding]
    patch = 2
    d = 8
    [dynamics]
    preset = "design"        # or "damico2024", the published notebook's dynamics

A :class:`ReproduceConfig` is the same sections, shared by every model, plus a table
``[models.<name>]`` per model with what it changes. An unknown key raises a ``ValueError``
that names it and lists the known ones.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spinsa._checks import check_choice, check_count, check_real
from spinsa._config import check_keys, config_from_dict, config_to_dict, flatten, read_toml
from spinsa._torch_dynamics import check_device
from spinsa.embedding import SCALES, PatchEmbedding
from spinsa.fit.config import FitConfig
from spinsa.model import DynamicsConfig

__all__ = [
    "DATASETS",
    "DYNAMICS_PRESETS",
    "MODEL_KINDS",
    "DataSection",
    "EmbeddingSection",
    "DynamicsSection",
    "TasksSection",
    "ExperimentConfig",
    "ModelSpec",
    "ReproduceConfig",
    "read_toml",
]

DATASETS = ("mnist", "fashion-mnist", "synthetic")
DYNAMICS_PRESETS = ("design", "damico2024")
MODEL_KINDS = ("attention",)  # the hook for other models (e.g. backpropagation baselines)
SECTIONS = ("data", "embedding", "fit", "dynamics", "tasks")
MNIST_SIZE = 28


@dataclass(frozen=True)
class DataSection:
    """Which images train and test the model.

    Parameters
    ----------
    dataset : {"mnist", "fashion-mnist", "synthetic"}
        ``"synthetic"``: seven-segment digits (:func:`spinsa.datasets.synthetic_digits`).
    n_train, per_class : int or None
        A seeded random subset of this many training images, or of this many per class
        (the paper: 1,000); not both. With neither, the whole training split.
    n_test : int
        A seeded random subset of this many test images.
    seed : int
        Seed of the subsets (and of the synthetic images).
    image_size : int
        Side of the synthetic images; MNIST and Fashion-MNIST are 28.
    """

    dataset: Literal["mnist", "fashion-mnist", "synthetic"] = "mnist"
    n_train: int | None = None
    per_class: int | None = None
    n_test: int = 1000
    seed: int = 0
    image_size: int = MNIST_SIZE

    def __post_init__(self):
        check_choice(self.dataset, "data.dataset", DATASETS)
        for name in ("n_train", "per_class"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), f"data.{name}", 1)
        if self.n_train is not None and self.per_class is not None:
            raise ValueError(
                "data.n_train and data.per_class are exclusive: give one of them "
                f"(got n_train = {self.n_train}, per_class = {self.per_class})"
            )
        if self.dataset == "synthetic" and self.n_train is None and self.per_class is None:
            raise ValueError("data.dataset = 'synthetic' needs data.n_train or data.per_class")
        check_count(self.n_test, "data.n_test", 1)
        check_count(self.seed, "data.seed", 0)
        check_count(self.image_size, "data.image_size", 2)
        if self.dataset != "synthetic" and self.image_size != MNIST_SIZE:
            raise ValueError(
                f"data.image_size is the side of the synthetic images; {self.dataset} images "
                f"are {MNIST_SIZE}x{MNIST_SIZE}, got image_size = {self.image_size}"
            )

    @property
    def image_shape(self) -> tuple[int, int]:
        return (self.image_size, self.image_size)

    @property
    def n_train_images(self) -> int | None:
        """Number of training images when it is known without the data set (else None)."""
        return self.n_train if self.per_class is None else 10 * self.per_class


@dataclass(frozen=True)
class EmbeddingSection:
    """How images become spins (:class:`spinsa.PatchEmbedding`).

    Parameters
    ----------
    patch : int
        Side of the square patches; it must tile the image.
    d : int or None
        Spin dimension (None: the minimum, 2 * patch**2).
    seed : int
        Seed of the random matrix F.
    scale : {"paper", "damico2024"}
        The paper's embedding, or the notebook's (pixels min(2p, 1), F scaled by 1/sqrt(2a)).
    """

    patch: int = 2
    d: int | None = None
    seed: int = 0
    scale: Literal["paper", "damico2024"] = "paper"

    def __post_init__(self):
        check_count(self.patch, "embedding.patch", 1)
        if self.d is not None:
            check_count(self.d, "embedding.d", 1)
        check_count(self.seed, "embedding.seed", 0)
        check_choice(self.scale, "embedding.scale", SCALES)


@dataclass(frozen=True)
class DynamicsSection:
    """The dynamics run at evaluation.

    Parameters
    ----------
    preset : {"design", "damico2024"}
        ``"design"``: eq. 1 (docs/model.md, 'Dynamics'), x_i <- Norm(h_i + gamma x_i)
        (:func:`spinsa.run`);
        ``"damico2024"``: the published notebook's (:mod:`spinsa.damico`), to which
        ``gamma``, ``norm``, ``update`` and ``seed`` do not apply: they are set to their
        defaults, so that configs that differ only there are the same run.
    lam_eval : float
        Inverse temperature of the dynamics (1 in the paper).
    gamma, norm, update
        As in :class:`spinsa.DynamicsConfig`.
    steps : int
        Number of steps T; errors are recorded at every t = 0 .. T.
    seed : int or None
        Seed of the asynchronous site orders (None: ``tasks.seed``), the same for every
        chunk of test images.
    device : str
        Where the dynamics runs (both presets): ``"numba"``, the CPU kernels (the default);
        ``"cpu"``, ``"cuda"``, ``"cuda:<k>"``, torch there; ``"auto"``, torch on CUDA when a
        GPU is seen, else numba (:func:`spinsa.run`). Results agree to rounding. Left out
        of the stored config at its default, so that files written before it existed read
        and compare as they did.
    """

    preset: Literal["design", "damico2024"] = "design"
    lam_eval: float = 1.0
    gamma: float = 1.0
    norm: Literal["sphere", "layernorm", "none"] = "sphere"
    update: Literal["sync", "async"] = "sync"
    steps: int = 100
    seed: int | None = None
    device: str = "numba"

    def __post_init__(self):
        check_choice(self.preset, "dynamics.preset", DYNAMICS_PRESETS)
        check_device(self.device, "dynamics.device")
        check_count(self.steps, "dynamics.steps", 0)
        if self.preset == "damico2024":  # what it ignores, at the defaults
            for name in ("gamma", "norm", "update", "seed"):
                object.__setattr__(self, name, DynamicsSection.__dataclass_fields__[name].default)
        try:  # the model's own rules, one definition of them
            run = self.model_config()
        except ValueError as err:
            raise ValueError(f"[dynamics]: {err} (lam is lam_eval here)") from None
        object.__setattr__(self, "lam_eval", run.lam)
        object.__setattr__(self, "gamma", run.gamma)

    def unused_options(self) -> tuple[str, ...]:
        """``device`` at its default (left out of the stored config, as before it existed)."""
        return ("device",) if self.device == "numba" else ()

    def model_config(self) -> DynamicsConfig:
        """The :class:`spinsa.DynamicsConfig` of a run of the design dynamics (lam = lam_eval)."""
        return DynamicsConfig(self.lam_eval, self.gamma, self.norm, self.update, self.seed)


@dataclass(frozen=True)
class TasksSection:
    """The two retrieval tasks of the paper (§III) and what the evaluation keeps.

    Parameters
    ----------
    mask_fraction, noise_variance : float
        Fraction of the tokens set to the zero spin (0.3); variance of the noise (0.7).
    clamp_visible : bool
        Keep the visible tokens fixed during the masked task's dynamics.
    seed : int
        Seed of the masks and the noise (per image, :func:`spinsa.tasks.task_inputs`).
    n_examples : int
        Number of test images whose decoded states are kept for figures.
    example_times : tuple of int
        Times at which those images are kept (those <= T).
    """

    mask_fraction: float = 0.3
    noise_variance: float = 0.7
    clamp_visible: bool = False
    seed: int = 0
    n_examples: int = 8
    example_times: tuple[int, ...] = (0, 1, 5, 20, 100)

    def __post_init__(self):
        frac = check_real(self.mask_fraction, "tasks.mask_fraction")
        if not 0 < frac <= 1:
            raise ValueError(f"tasks.mask_fraction must be in (0, 1], got {frac}")
        object.__setattr__(self, "mask_fraction", frac)
        var = check_real(self.noise_variance, "tasks.noise_variance")
        if var < 0:
            raise ValueError(f"tasks.noise_variance must be >= 0, got {var}")
        object.__setattr__(self, "noise_variance", var)
        if not isinstance(self.clamp_visible, bool):
            raise ValueError(
                f"tasks.clamp_visible must be true or false, got {self.clamp_visible!r}"
            )
        check_count(self.seed, "tasks.seed", 0)
        check_count(self.n_examples, "tasks.n_examples", 0)
        times = self.example_times
        if isinstance(times, (str, bytes)) or not hasattr(times, "__iter__"):
            raise ValueError(f"tasks.example_times must be a list of integers, got {times!r}")
        times = tuple(check_count(t, "tasks.example_times[...]", 0) for t in times)
        object.__setattr__(self, "example_times", tuple(sorted(set(times))))

    def inputs(self, task: str, embedding: PatchEmbedding, images, index):
        """``(x0 (P, N, d), mask (P, N) or None)``: :func:`spinsa.tasks.task_inputs` with this
        section's seed, mask fraction and noise variance, for images numbered ``index`` in
        their split (so an image is corrupted alike in every evaluation, analysis, baseline).
        """
        from spinsa.tasks import task_inputs

        return task_inputs(task, images, embedding, index=index, **self.streams())

    def streams(self) -> dict[str, Any]:
        """``seed``, ``mask_fraction`` and ``noise_variance``: what decides the corruptions."""
        return {k: getattr(self, k) for k in ("seed", "mask_fraction", "noise_variance")}


@dataclass(frozen=True)
class ExperimentConfig:
    """One model, end to end; a patch that does not tile the images fails on construction.

    Parameters
    ----------
    name : str
        A label for the model (file names, legends).
    data : DataSection
    embedding : EmbeddingSection
    fit : spinsa.fit.FitConfig
        The pseudo-likelihood fit; ``fit.lam`` is lambda_train.
    dynamics : DynamicsSection
    tasks : TasksSection
    """

    name: str = "design"
    data: DataSection = field(default_factory=DataSection)
    embedding: EmbeddingSection = field(default_factory=EmbeddingSection)
    fit: FitConfig = field(default_factory=FitConfig)  # backend "lbfgs", as in the API
    dynamics: DynamicsSection = field(default_factory=DynamicsSection)
    tasks: TasksSection = field(default_factory=TasksSection)

    def __post_init__(self):
        if not (
            isinstance(self.name, str) and self.name.replace("-", "").replace("_", "").isalnum()
        ):
            raise ValueError(
                f"name must be a non-empty string of letters, digits, '-' and '_', "
                f"got {self.name!r}"
            )
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "name" and isinstance(value, Mapping):  # a section given as a table
                cls = type(f.default_factory())
                object.__setattr__(self, f.name, config_from_dict(cls, value, f"[{f.name}]"))
        self.make_embedding()  # validates patch tiling and d

    def make_embedding(self) -> PatchEmbedding:
        """The :class:`spinsa.PatchEmbedding` of this config (raises if the patch does not tile)."""
        e = self.embedding
        return PatchEmbedding(
            image_shape=self.data.image_shape, patch=e.patch, d=e.d, seed=e.seed, scale=e.scale
        )

    def training_config(self) -> ExperimentConfig:
        """What a fit depends on: this config's data (but ``n_test``), embedding and fit, the
        other sections at their defaults and the name ``"fit"``. Configs with the same
        training config share their couplings: a scan fits once for all of them."""
        data = dataclasses.replace(self.data, n_test=DataSection.n_test)
        return ExperimentConfig("fit", data, self.embedding, self.fit)

    def check_memory(self) -> None:
        """Refuse a fit that cannot fit in memory, from the sizes alone, before any data is
        loaded (:func:`spinsa.fit.estimate_memory`; a whole MNIST split is 60,000 images)."""
        if self.fit.check_memory:
            from spinsa.fit.memory import estimate_memory

            emb = self.make_embedding()
            P = self.data.n_train_images or 60_000
            estimate_memory(P, emb.n_tokens, emb.d, config=self.fit).check()

    # ------------------------------------------------------------------ dicts and TOML
    def to_dict(self) -> dict[str, Any]:
        """The config as nested plain dicts (``{"name": ..., "data": {...}, ...}``)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ExperimentConfig:
        """The inverse of :meth:`to_dict`; missing keys take their defaults, and a ``fit``
        table with a ``preset`` gets the preset's values under its other keys."""
        return config_from_dict(cls, values, "the experiment config")

    @classmethod
    def from_toml(cls, path_or_text: str | os.PathLike) -> ExperimentConfig:
        """The config from a TOML file or TOML text."""
        return cls.from_dict(read_toml(path_or_text))

    def with_overrides(self, overrides: Mapping[str, Any]) -> ExperimentConfig:
        """A copy with some values changed, by dotted key: ``{"fit.lam": 5.0, "name": "x"}``.

        Overriding ``fit.preset`` rebuilds the fit section from that preset (plus the other
        ``fit.*`` overrides of the same call); setting ``data.n_train`` clears
        ``data.per_class`` and the reverse.
        """
        nested = self.to_dict()
        if "fit.preset" in overrides:
            nested["fit"] = {}
        for a, b in (("n_train", "per_class"), ("per_class", "n_train")):
            if overrides.get(f"data.{a}") is not None and f"data.{b}" not in overrides:
                nested["data"][b] = None  # the two ways of sizing the training set exclude
        for key, value in overrides.items():
            section, _, name = str(key).partition(".")
            if key == "name":
                nested["name"] = value
            elif section in SECTIONS and name:  # an unknown name fails in from_dict
                nested[section][name] = value
            else:
                known = ", ".join(["name", *(f"{s}.<key>" for s in SECTIONS)])
                raise ValueError(f"unknown key {key!r} in the overrides; known keys: {known}")
        return ExperimentConfig.from_dict(nested)


@dataclass(frozen=True)
class ModelSpec:
    """One model of a :class:`ReproduceConfig`: a name, a kind and its overrides.

    Parameters
    ----------
    name : str
    kind : {"attention"}
        What is trained and evaluated (only spinsa's attractor network, so far).
    overrides : tuple of (str, value)
        Dotted keys (``"fit.backend"``) applied to the shared sections.
    """

    name: str
    kind: Literal["attention"] = "attention"
    overrides: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        check_choice(self.kind, f"models.{self.name}.kind", MODEL_KINDS)
        pairs = tuple((str(k), v) for k, v in dict(self.overrides).items())
        object.__setattr__(self, "overrides", pairs)


@dataclass(frozen=True)
class ReproduceConfig:
    """Shared sections plus a list of models: what :func:`spinsa.experiments.reproduce` runs.

    TOML layout: the sections of :class:`ExperimentConfig` at the top level, then one table
    per model, whose sub-tables (or dotted keys) override the shared ones::

        [models.design]
        fit = { backend = "lbfgs", max_iter = 40 }
        [models.damico2024]
        embedding = { scale = "damico2024" }
        fit = { preset = "damico2024", epochs = 20 }
        dynamics = { preset = "damico2024" }

    Parameters
    ----------
    base : ExperimentConfig
        The sections every model shares.
    models : tuple of ModelSpec
        The models, each the base with its overrides.
    """

    base: ExperimentConfig = field(default_factory=ExperimentConfig)
    models: tuple[ModelSpec, ...] = ()

    def __post_init__(self):
        if not isinstance(self.base, ExperimentConfig):
            object.__setattr__(self, "base", ExperimentConfig.from_dict(self.base))
        models = tuple(m if isinstance(m, ModelSpec) else ModelSpec(**m) for m in self.models)
        if not models:
            raise ValueError("a reproduce config needs at least one model ([models.<name>])")
        names = [m.name for m in models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, got {names}")
        object.__setattr__(self, "models", models)
        self.experiments()  # validates every model's overrides

    def experiments(self) -> dict[str, ExperimentConfig]:
        """``name -> ExperimentConfig`` of every model, in order."""
        out = {}
        for m in self.models:
            try:
                out[m.name] = self.base.with_overrides({**dict(m.overrides), "name": m.name})
            except ValueError as err:
                raise ValueError(f"[models.{m.name}]: {err}") from None
        return out

    def to_dict(self) -> dict[str, Any]:
        """Nested dicts: the shared sections, then ``models = {name: {kind, overrides}}``."""
        models = {m.name: {"kind": m.kind, "overrides": dict(m.overrides)} for m in self.models}
        return {**{k: v for k, v in self.base.to_dict().items() if k != "name"}, "models": models}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ReproduceConfig:
        """The inverse of :meth:`to_dict`; also accepts the TOML layout (model tables with
        sub-tables instead of an ``overrides`` table)."""
        check_keys(values, (*SECTIONS, "models"), "the reproduce config")
        base = ExperimentConfig.from_dict({k: v for k, v in values.items() if k != "models"})
        models_in = values.get("models", {})
        if not isinstance(models_in, Mapping):
            raise ValueError("models must be a table of [models.<name>] tables")
        models = []
        for name, table in models_in.items():
            check_keys(table, ("kind", "overrides", *SECTIONS), f"[models.{name}]")
            table = dict(table)
            kind = table.pop("kind", "attention")
            overrides = flatten(table.pop("overrides", {}))
            overrides.update(flatten(table))
            models.append(ModelSpec(name=name, kind=kind, overrides=tuple(overrides.items())))
        return cls(base=base, models=tuple(models))

    @classmethod
    def from_toml(cls, path_or_text: str | os.PathLike) -> ReproduceConfig:
        """The config from a TOML file or text (layout in the class docstring)."""
        return cls.from_dict(read_toml(path_or_text))

    @classmethod
    def paper(cls, quick: bool = True) -> ReproduceConfig:
        """The paper's bare-SA experiment on MNIST (2x2 patches, d = 8, lambda_train = 5,
        lambda_eval = 1, 30 % masked tokens, noise variance 0.7, T = 100), with the
        model's eq. 1 dynamics (docs/model.md, 'Dynamics') and the published notebook's
        preset (T = 101, as it runs) side by side.

        ``quick``: 10,000 training images (1,000 per class) and 1,000 test images;
        otherwise 50,000 and 10,000, and both models also on 4x4 patches (d = 32; named
        ``design_4x4`` and ``damico2024_4x4``), for the paper's Fig. 2 and its patch-size
        claim. Shipped as ``analysis/configs/reproduce_*.toml``.
        """
        per_class, n_test = (1000, 1000) if quick else (5000, 10000)
        fit = {"preset": "damico2024", "lam": 5.0, "epochs": 10, "eval_every": 10, "device": "auto"}
        models = {
            "design": {
                "fit": {"backend": "lbfgs", "max_iter": 40 if quick else 100},
                "dynamics": {"preset": "design"},
            },
            "damico2024": {
                "embedding": {"scale": "damico2024"},
                "fit": fit,
                # the notebook runs 101 steps and labels the state after step q + 1 "q"
                "dynamics": {"preset": "damico2024", "steps": 101},
            },
        }
        if not quick:  # the paper's Fig. 2 compares all models on 4x4 patches
            four = {"patch": 4, "d": 32}
            for name in ("design", "damico2024"):
                model = dict(models[name])
                model["embedding"] = {**model.get("embedding", {}), **four}
                models[f"{name}_4x4"] = model
        return cls.from_dict(
            {
                "data": {"dataset": "mnist", "per_class": per_class, "n_test": n_test, "seed": 0},
                "embedding": {"patch": 2, "d": 8, "seed": 0},
                "fit": {"backend": "lbfgs", "lam": 5.0},
                "dynamics": {"lam_eval": 1.0, "steps": 100},
                "tasks": {"mask_fraction": 0.3, "noise_variance": 0.7, "seed": 0},
                "models": models,
            }
        )
