"""``spinsa fit``: fit the couplings from a TOML config and/or flags, write an HDF5 file.

::

    spinsa fit --data patterns.npy --backend lbfgs --constraint row --out fit.h5
    spinsa fit --dataset synthetic --n-samples 200 --n-tokens 16 --dim 6 --out fit.h5
    spinsa fit --dataset mnist --per-class 1000 --preset damico2024 --epochs 20 --out fit.h5
    spinsa fit fit.toml                       # the same, from a file; flags override it

A config file has an optional top-level ``out`` and ``checkpoint``, a ``[data]`` table (the
data flags without dashes: ``path``, ``key``, ``dataset``, ``n_samples``, ...), and a
``[fit]`` table with any field of :class:`spinsa.fit.FitConfig`::

    out = "fit.h5"
    [data]
    dataset = "synthetic"
    n_samples = 200
    n_tokens = 16
    dim = 6
    [fit]
    backend = "lbfgs"
    lam = 5.0
    constraint = "row"

Unless ``--no-checkpoint`` is given, the fit checkpoints to ``OUT.ckpt.h5`` and re-running
the same command after an interruption resumes from it; the checkpoint is removed once the
output file is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import numpy as np

DATA_KEYS = ("xi", "patterns", "x")
DATASETS = ("synthetic", "mnist", "fashion-mnist")
DATA_FIELDS = {
    "path": str,
    "key": str,
    "dataset": str,
    "n_samples": int,
    "per_class": int,
    "n_tokens": int,
    "dim": int,
    "patch": int,
    "embedding_scale": str,
    "split": str,
    "data_seed": int,
}


def _field_types() -> dict[str, tuple[Any, bool, tuple | None]]:
    """FitConfig field -> (python type, optional?, choices)."""
    from spinsa.fit.config import FitConfig

    hints = typing.get_type_hints(FitConfig)
    out = {}
    for f in dataclasses.fields(FitConfig):
        hint, optional = hints[f.name], False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(members) < len(typing.get_args(hint))
            hint = members[0]
        if typing.get_origin(hint) is typing.Literal:
            out[f.name] = (str, optional, typing.get_args(hint))
        else:
            out[f.name] = (hint, optional, None)
    return out


def _field_help() -> dict[str, str]:
    """First sentence of each parameter's description in FitConfig's docstring."""
    from spinsa.fit.config import FitConfig

    out: dict[str, str] = {}
    names: list[str] = []
    for line in (FitConfig.__doc__ or "").splitlines():
        head = re.match(r"^    (\w+(?:, \w+)*) : ", line)
        if head:
            names = head.group(1).split(", ")
        elif names and line.startswith("        ") and line.strip():
            for name in names:
                out[name] = (out.get(name, "") + " " + line.strip()).strip()
    clean = {k: re.sub(r":\w+:`([^`]*)`", r"\1", v).replace("``", "") for k, v in out.items()}
    return {k: re.split(r"(?<=\.)\s", v, maxsplit=1)[0].rstrip(".") for k, v in clean.items()}


def _converter(kind, optional: bool):
    def convert(text: str):
        if optional and text.lower() in ("none", "null"):
            return None
        return kind(text)

    convert.__name__ = kind.__name__  # argparse names the type in its errors
    return convert


def add_parser(sub) -> None:
    """Declare ``spinsa fit`` and its arguments on the subcommand parsers ``sub``."""
    from spinsa.fit.config import PRESETS, FitConfig

    p = sub.add_parser(
        "fit",
        help="fit the couplings by pseudo-likelihood (torch or L-BFGS)",
        description="Fit the couplings J to training patterns by minimising the "
        "pseudo-likelihood objective (closed-form gradient, no backpropagation) and write J "
        "and the loss history to an HDF5 file. Options come from CONFIG (TOML: [data] and "
        "[fit] tables) and flags, flags winning. Re-running after an interruption resumes "
        "from the checkpoint.",
    )
    p.add_argument("config", nargs="?", type=Path, help="TOML config file")
    p.add_argument("-o", "--out", type=Path, help="output HDF5 file (default: fit.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--checkpoint", type=Path, help="checkpoint file (default: OUT.ckpt.h5)")
    p.add_argument("--no-checkpoint", action="store_true", help="do not checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--estimate", action="store_true", help="print the memory estimate and exit without fitting"
    )
    d = p.add_argument_group("data (a file of patterns, or a data set)")
    d.add_argument(
        "--data", dest="path", type=Path, help="patterns (P, N, d): .npy, .npz or .h5/.hdf5"
    )
    d.add_argument(
        "--key",
        help=f"array name in an .npz/.h5 file (default: {'/'.join(DATA_KEYS)} or the only array)",
    )
    d.add_argument("--dataset", choices=DATASETS, help="a data set instead of a file")
    d.add_argument("--n-samples", type=int, help="synthetic: P; images: a random subset of P")
    d.add_argument("--per-class", type=int, help="images: this many of each class")
    d.add_argument("--n-tokens", type=int, help="synthetic: N")
    d.add_argument("--dim", type=int, help="synthetic: d; images: spin dimension (default 2a)")
    d.add_argument("--patch", type=int, help="images: patch side (default 2)")
    d.add_argument(
        "--embedding-scale",
        choices=("paper", "damico2024"),
        help="images: the embedding's scale (default: damico2024 with that preset)",
    )
    d.add_argument("--split", choices=("train", "test"), help="images: split (default train)")
    d.add_argument("--data-seed", type=int, help="seed of the data (default 0)")
    g = p.add_argument_group("fit options (fields of spinsa.fit.FitConfig)")
    defaults = FitConfig()
    helps = _field_help()
    for name, (kind, optional, choices) in _field_types().items():
        flag = "--" + name.replace("_", "-")
        default = getattr(defaults, name)
        text = helps.get(name, "").replace("%", "%%")
        kwargs: dict[str, Any] = dict(default=argparse.SUPPRESS, help=f"{text} (default {default})")
        if name == "preset":
            kwargs.update(choices=tuple(PRESETS), help="a named recipe; options override it")
        elif kind is bool:
            kwargs.update(action=argparse.BooleanOptionalAction)
        elif choices is not None:
            kwargs.update(choices=choices)
        else:
            kwargs.update(type=_converter(kind, optional), metavar=kind.__name__.upper())
            if optional:
                kwargs["help"] = f"{text} (default {default}; 'none' for None)"
        g.add_argument(flag, **kwargs)
    p.set_defaults(func=run_fit_command)


def _read_toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    with open(path, "rb") as fh:
        try:
            doc = tomllib.load(fh)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path} is not valid TOML: {err}") from None
    unknown = sorted(set(doc) - {"out", "checkpoint", "data", "fit"})
    if unknown:
        raise ValueError(
            f"{path}: unknown top-level key(s) {unknown}; expected out, checkpoint, "
            "[data] and [fit]"
        )
    bad = sorted(set(doc.get("data", {})) - set(DATA_FIELDS))
    if bad:
        raise ValueError(f"{path}: unknown [data] key(s) {bad}; known: {sorted(DATA_FIELDS)}")
    return doc


def load_patterns(path: Path, key: str | None = None) -> np.ndarray:
    """Patterns (P, N, d) from a .npy, .npz or HDF5 file (array ``key``, a usual name, or the
    only array)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return np.asarray(z[_pick(list(z.files), key, path)])
    if suffix in (".h5", ".hdf5"):
        import h5py

        with h5py.File(path, "r") as f:
            names: list[str] = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            return np.asarray(f[_pick(names, key, path)][()])
    raise ValueError(f"data file {path}: unknown format {suffix!r}; use .npy, .npz or .h5")


def _pick(names: list[str], key: str | None, path: Path) -> str:
    if key is not None:
        if key not in names:
            raise ValueError(f"{path} has no array {key!r}; its arrays: {names}")
        return key
    for k in DATA_KEYS:
        if k in names:
            return k
    if len(names) == 1:
        return names[0]
    raise ValueError(f"{path} holds several arrays {names}; say which with --key")


def _load_data(data: dict, preset: str | None) -> tuple[np.ndarray, dict]:
    """Patterns and a description of where they came from (stored with the result)."""
    if data.get("path") is not None and data.get("dataset") is not None:
        raise ValueError("give either a data file (--data) or a data set (--dataset), not both")
    if data.get("path") is not None:
        xi = load_patterns(Path(data["path"]), data.get("key"))
        return xi, {"data.path": str(Path(data["path"]).resolve()), "data.key": data.get("key")}
    name = data.get("dataset")
    if name is None:
        raise ValueError(
            "no training data: give --data FILE or --dataset "
            f"{{{','.join(DATASETS)}}} (or a [data] table in the config)"
        )
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {name!r}")
    seed = data.get("data_seed") or 0
    if name == "synthetic":
        from spinsa.datasets import random_patterns

        missing = [k for k in ("n_samples", "n_tokens", "dim") if data.get(k) is None]
        if missing:
            raise ValueError(
                "--dataset synthetic needs "
                + ", ".join("--" + k.replace("_", "-") for k in missing)
            )
        xi = random_patterns(data["n_samples"], data["n_tokens"], data["dim"], seed=seed)
        return xi, {"data.dataset": name, "data.seed": seed}
    from spinsa import datasets
    from spinsa.embedding import PatchEmbedding

    loader = datasets.load_mnist if name == "mnist" else datasets.load_fashion_mnist
    images, _labels = loader(
        data.get("split") or "train",
        n=data.get("n_samples"),
        per_class=data.get("per_class"),
        seed=seed,
    )
    scale = data.get("embedding_scale") or ("damico2024" if preset == "damico2024" else "paper")
    emb = PatchEmbedding(
        image_shape=images.shape[1:3],
        patch=data.get("patch") or 2,
        d=data.get("dim"),
        seed=seed,
        scale=scale,
    )
    xi = emb.encode(images)
    return xi, {
        "data.dataset": name,
        "data.seed": seed,
        "data.split": data.get("split") or "train",
        "data.patch": emb.patch,
        "data.d": int(xi.shape[2]),
        "data.embedding_scale": scale,
        "data.n_samples": int(xi.shape[0]),
    }


def run_fit_command(args) -> int:
    """The handler of ``spinsa fit``."""
    from spinsa.fit.api import fit_pseudolikelihood
    from spinsa.fit.checkpoint import save_fit
    from spinsa.fit.config import FitConfig
    from spinsa.fit.memory import estimate_memory

    doc = _read_toml(args.config) if args.config is not None else {}
    data = dict(doc.get("data", {}))
    for name in DATA_FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    options = dict(doc.get("fit", {}))
    known = {f.name for f in dataclasses.fields(FitConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown [fit] option(s) {unknown}; known: {sorted(known)}")
    options.update({k: getattr(args, k) for k in known if hasattr(args, k)})
    preset = options.pop("preset", None)
    config = FitConfig.from_preset(preset, **options)

    out = Path(args.out or doc.get("out") or "fit.h5")
    if out.exists() and not args.overwrite and not args.estimate:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    xi, source = _load_data(data, config.preset)
    xi = np.asarray(xi)
    if xi.ndim != 3:
        raise ValueError(f"the patterns must have shape (P, N, d), got {xi.shape}")
    estimate = estimate_memory(*xi.shape, config=config)
    if args.estimate:
        print(
            f"spinsa fit: P = {xi.shape[0]}, N = {xi.shape[1]}, d = {xi.shape[2]}, "
            f"backend {config.backend}: {estimate}"
        )
        return 0
    checkpoint = None
    if not args.no_checkpoint:
        checkpoint = Path(
            args.checkpoint or doc.get("checkpoint") or out.with_name(out.name + ".ckpt.h5")
        )
        if checkpoint.exists():
            print(f"spinsa fit: resuming from {checkpoint}", file=sys.stderr)
    result = fit_pseudolikelihood(
        xi, config=config, checkpoint=checkpoint, progress=not args.no_progress
    )
    save_fit(
        out,
        result,
        overwrite=args.overwrite,
        attrs={
            **source,
            "n_samples": int(xi.shape[0]),
            "n_tokens": int(xi.shape[1]),
            "d": int(xi.shape[2]),
        },
    )
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    print(
        f"spinsa fit: L = {result.loss:.6g} (from {result.epoch_loss[0]:.6g}), "
        f"{result.n_steps} steps in {result.wall_time:.1f} s on {result.device}; "
        f"{result.message}; wrote {out}"
    )
    return 0
