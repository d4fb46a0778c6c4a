"""Analysis results in a run's HDF5 file, under ``/analysis/<name>``: a result's arrays become
the group's datasets, its other fields and ``result_type`` (its class) the group's attributes::

    report = find_attractors(J, 1.0, x0s, 200, patterns=xi)
    save_analysis("run.h5", "attractors", report)
    again = load_analysis("run.h5", "attractors")      # an AttractorReport
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from spinsa import io
from spinsa.analysis._results import AnalysisResult, result_class
from spinsa.io.schema import decode_attr

__all__ = [
    "GROUP",
    "find_results",
    "list_analyses",
    "load_analysis",
    "load_result",
    "save_analysis",
]

GROUP = "analysis"


def _group(name: str) -> str:
    if not isinstance(name, str) or not name.strip("/"):
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    return f"{GROUP}/{name.strip('/')}"


def save_analysis(
    path: str | os.PathLike,
    name: str,
    result: AnalysisResult,
    *,
    attrs: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> None:
    """Write ``result`` to the group ``/analysis/<name>`` of the spinsa file ``path``, atomically.

    Parameters
    ----------
    path : str or PathLike
        An existing spinsa HDF5 file (:func:`spinsa.io.write_file`).
    name : str
        Name of the analysis (``"overlaps"``, ``"attractors/hebbian"``...).
    result : AnalysisResult
    attrs : mapping, optional
        Extra attributes (e.g. the source of the couplings), not named like a field.
    overwrite : bool
        Replace an existing analysis of that name.
    """
    if not isinstance(result, AnalysisResult):
        raise ValueError(f"result must be a spinsa.analysis result, got {type(result).__name__}")
    group_attrs = result.attrs()
    for key, value in (attrs or {}).items():
        if key in group_attrs:
            raise ValueError(f"attrs[{key!r}] clashes with a field of {type(result).__name__}")
        group_attrs[key] = value
    io.write_group(path, _group(name), result.to_arrays(), group_attrs, overwrite=overwrite)


def load_analysis(path: str | os.PathLike, name: str) -> AnalysisResult:
    """Read back the result saved under ``/analysis/<name>`` (same class, same fields)."""
    return load_result(path, _group(name))


def load_result(path: str | os.PathLike, group: str) -> AnalysisResult:
    """Read back the result saved at any ``group`` of ``path`` (by :func:`save_analysis`,
    or by :func:`spinsa.io.write_group` with ``result.to_arrays()`` and ``result.attrs()``)."""
    arrays, attrs = io.read_group(path, group)
    if "result_type" not in attrs:
        raise ValueError(f"{path}: group {group!r} is not a saved analysis result")
    return result_class(attrs["result_type"]).from_arrays(arrays, attrs)


def find_results(path: str | os.PathLike, result_type: str | None = None) -> list[str]:
    """The groups of ``path``, anywhere in the file, that hold a saved result (of class
    ``result_type``, e.g. ``"AttractorReport"``, when given), sorted.

    Parameters
    ----------
    path : str or os.PathLike
        An HDF5 file written by spinsa (a run file or a user's own file).
    result_type : str, optional
        The class name of the results wanted; any saved result when None.

    Returns
    -------
    list of str
        Group paths without the leading ``/``, for :func:`load_result`.
    """
    if result_type is not None:
        result_class(result_type)  # an unknown type lists the known ones
    found: list[str] = []

    def visit(name, obj):
        kind = obj.attrs.get("result_type") if hasattr(obj, "attrs") else None
        if kind is not None and result_type in (None, decode_attr(kind)):
            found.append(name)

    with io.open_file(path) as f:
        f.visititems(visit)
    return sorted(found)


def list_analyses(path: str | os.PathLike) -> list[str]:
    """Names of the analyses saved in ``path`` (groups under ``/analysis`` with a result)."""
    names: list[str] = []
    with io.open_file(path) as f:
        if GROUP in f:
            f[GROUP].visititems(
                lambda sub, obj: names.append(sub) if "result_type" in obj.attrs else None
            )
    return sorted(names)
