"""Configs as plain data: one TOML reader, one dict round trip for nested frozen dataclasses.

Every config of spinsa is a frozen dataclass validated in ``__post_init__``. These helpers
turn one into nested plain dicts (for HDF5 attributes and TOML) and back, refusing unknown
keys with a message that lists the known ones::

    cfg = config_from_dict(ExperimentConfig, read_toml("experiment.toml"))
    config_to_dict(cfg) == read_toml(...)  # up to defaults
"""

from __future__ import annotations

import dataclasses
import os
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "read_toml",
    "flatten",
    "config_to_dict",
    "config_from_dict",
    "check_keys",
    "config_differences",
    "describe_differences",
]


def read_toml(path_or_text: str | os.PathLike) -> dict:
    """A TOML document from a file path or from TOML text.

    A ``Path``, or a one-line string that names an existing file or ends in ``.toml``, is
    read as a file; any other string is parsed as TOML text.

    Parameters
    ----------
    path_or_text : str or PathLike
        A TOML file, or TOML text.

    Returns
    -------
    dict
        The document's tables as nested dicts.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Not valid TOML (the message names the file and the position).
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    where = "the config text"
    if isinstance(path_or_text, os.PathLike) or (
        isinstance(path_or_text, str)
        and "\n" not in path_or_text
        and (path_or_text.endswith(".toml") or Path(path_or_text).is_file())
    ):
        path = Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        text, where = path.read_text(encoding="utf-8"), str(path)
    elif isinstance(path_or_text, str):
        text = path_or_text
    else:
        raise ValueError(
            f"expected a TOML file path or TOML text, got {type(path_or_text).__name__}"
        )
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{where} is not valid TOML: {err}") from None


def flatten(mapping: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys: ``{"fit": {"lam": 5}} -> {"fit.lam": 5}``.

    An empty nested mapping stays a leaf.
    """
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _plain_json(value: Any) -> Any:
    """``value`` as JSON would give it back: tuples become lists, numpy scalars numbers."""
    import json

    def default(obj):
        if hasattr(obj, "tolist"):  # numpy scalars and arrays
            return obj.tolist()
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return config_to_dict(obj)
        if isinstance(obj, os.PathLike):
            return os.fspath(obj)
        raise TypeError(f"cannot compare a value of type {type(obj).__name__}")

    return json.loads(json.dumps(value, default=default))


def config_differences(saved, now, ignore=()) -> dict[str, tuple[Any, Any]]:
    """Where two configs differ: ``dotted key -> (saved value, current value)``.

    The one comparison of configs in spinsa (finished stages, checkpoints, runs side by
    side). Both sides are nested mappings or dataclass configs; they are compared as JSON
    would store them (a tuple equals a list), key by dotted key. A key absent on one side
    shows as ``MISSING`` there.

    Parameters
    ----------
    saved, now : Mapping or dataclass
    ignore : iterable of str
        Dotted keys (or prefixes ending in ``"."``) left out of the comparison.
    """
    a, b = (
        flatten(_plain_json(config_to_dict(c) if dataclasses.is_dataclass(c) else c))
        for c in (saved, now)
    )
    ignore = tuple(ignore)

    def ignored(key: str) -> bool:
        return any(key == i or (i.endswith(".") and key.startswith(i)) for i in ignore)

    return {
        key: (a.get(key, MISSING), b.get(key, MISSING))
        for key in sorted(set(a) | set(b))
        if not ignored(key) and a.get(key, MISSING) != b.get(key, MISSING)
    }


class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


#: How :func:`config_differences` shows a key that one side lacks.
MISSING: Any = _Missing()


def describe_differences(diffs: Mapping[str, tuple[Any, Any]], limit: int = 4) -> str:
    """``"fit.lam = 5 there, 2 now; ..."``: the first ``limit`` differences as one phrase."""
    shown = [f"{k} = {old!r} there, {new!r} now" for k, (old, new) in list(diffs.items())[:limit]]
    if len(diffs) > limit:
        shown.append(f"and {len(diffs) - limit} more")
    return "; ".join(shown) or "no difference"


def check_keys(values, known, where: str) -> None:
    """Raise ``ValueError`` unless ``values`` is a mapping whose keys are all in ``known``."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} must be a table of keys and values, got {values!r}")
    for key in values:
        if key not in known:
            raise ValueError(f"unknown key {key!r} in {where}; known keys: {', '.join(known)}")


def config_to_dict(config) -> dict[str, Any]:
    """A dataclass config as nested plain dicts (tuples become lists, as TOML has them).

    A dataclass with an ``unused_options()`` method leaves those fields out (the options of a
    method not in use: they are at their defaults, and a stored config stays what it was
    before they existed).
    """

    def plain(value):
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            unused = value.unused_options() if hasattr(value, "unused_options") else ()
            return {
                f.name: plain(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.name not in unused
            }
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(config)


def _dataclass_in(hint) -> type | None:
    """The dataclass a field's type names (also inside ``X | None``), or None."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _is_tuple(hint) -> bool:
    return (
        hint is tuple
        or typing.get_origin(hint) is tuple
        or any(typing.get_origin(a) is tuple for a in typing.get_args(hint))
    )


def config_from_dict(cls, values: Mapping[str, Any], where: str | None = None):
    """The dataclass ``cls`` from nested dicts; nested dataclass fields are built the same way.

    Missing keys take their defaults; an unknown key raises ``ValueError`` naming it and the
    known ones; lists become tuples where the field is a tuple; a value that already is the
    field's dataclass is kept. A nested dataclass with a ``from_dict`` classmethod of its own
    builds itself (e.g. ``FitConfig``, whose ``preset`` key brings the preset's values).
    """
    where = where or f"the {cls.__name__}"
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    check_keys(values, names, where)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in values.items():
        sub = _dataclass_in(hints[name])
        if sub is not None and isinstance(value, Mapping):
            # "[data]" for a section of the top level, "[models.x]" further down
            inner = f"{where[:-1]}.{name}]" if where.startswith("[") else f"[{name}]"
            own = getattr(sub, "from_dict", None)
            value = own(value) if own is not None else config_from_dict(sub, value, inner)
        elif isinstance(value, list) and _is_tuple(hints[name]):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def parse_assignments(items: list[str] | None, flag: str = "--set") -> dict[str, Any]:
    """``["fit.lam=5", "name=x"]`` -> ``{"fit.lam": 5, "name": "x"}``: the ``KEY=VALUE``
    arguments of a command-line ``flag``; values are TOML literals (``5``, ``5.0``,
    ``true``, ``"text"``, ``[0, 1]``), bare words are strings."""
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{flag} expects KEY=VALUE (e.g. fit.lam=5), got {item!r}")
        try:
            out[key] = read_toml(f"v = {text.strip()}\n")["v"]
        except ValueError:
            out[key] = text.strip()
    return out
