"""Phase diagrams and error curves of a collected scan (:func:`spinsa.scan.collect`).

Every function takes the ``xarray.Dataset`` that :func:`spinsa.scan.collect` returns or
:func:`spinsa.scan.open_collected` reads back, and draws what it holds::

    ds = scan.open_collected("runs/example")
    ax = phase_diagram(ds, "best_error", "alpha", "dynamics.lam")
    paths = draw_phase_diagrams(ds, "runs/example/figures")    # one file per variable
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice
from spinsa.analysis.capacity import HOPFIELD_ALPHA_C, critical_load
from spinsa.analysis.summary import SIGNIFICANT_Z
from spinsa.plotting._base import band, finish, level, new_figure, save_figure

__all__ = [
    "DIAGRAM_VARIABLES",
    "best_point",
    "capacity_figure",
    "curves_figure",
    "draw_phase_diagrams",
    "draw_scan_figures",
    "line_panels",
    "phase_diagram",
    "phase_panels",
]

# The quantities a phase diagram usually shows, drawn by default when present.
DIAGRAM_VARIABLES = (
    "ref_gain_z", "best_error", "best_t", "lifetime", "n_attractors", "mean_overlap"
)  # fmt: skip
REDUCTIONS = ("mean", "median", "min", "max")


def _is_log(values: np.ndarray) -> bool:
    """Numbers that are geometrically rather than linearly spaced (a log axis suits them)."""
    if values.dtype.kind not in "iuf" or values.size < 3 or np.any(values <= 0):
        return False
    geo, lin = np.diff(np.log(values)), np.diff(values)
    geometric = np.std(geo) / abs(geo.mean()) < np.std(lin) / abs(lin.mean())
    return bool(values.max() / values.min() >= 10 and geometric)


def _selected(ds, var: str, fixed: Mapping[str, Any] | None):
    """``ds[var]`` as floats with the ``fixed`` dimensions selected (nearest on numbers)."""
    if var not in ds.data_vars or ds[var].dtype.kind not in "biuf":
        names = [v for v in ds.data_vars if ds[v].dtype.kind in "biuf"]
        raise ValueError(f"{var!r} is not a numeric variable of the dataset; those: {names}")
    da = ds[var].astype(float)
    for dim, value in (fixed or {}).items():
        if dim not in da.dims:
            raise ValueError(f"cannot fix {dim!r}: {var!r} has dimensions {list(da.dims)}")
        try:
            da = da.sel({dim: value}, method="nearest" if da[dim].dtype.kind in "iuf" else None)
        except (KeyError, TypeError, ValueError):
            values = da[dim].values.tolist()
            raise ValueError(f"{dim} = {value!r} is not on the axis; values: {values}") from None
    return da


def _factors(axis: str | None) -> tuple[str, ...]:
    """The dimensions of a plot axis: ``"a"``, or ``"a*b"``, the product of two numeric ones."""
    return () if axis is None else tuple(part.strip() for part in axis.split("*"))


def _finite_range(values: np.ndarray) -> tuple[float, float]:
    """(min, max) of the finite values, (0, 1) when there are none."""
    finite = values[np.isfinite(values)]
    return (finite.min(), finite.max()) if finite.size else (0.0, 1.0)


def _is_categorical(da, dim: str) -> bool:
    """A dimension whose values are labels (strings, booleans, JSON), not numbers."""
    return da[dim].dtype.kind not in "iuf"


def _refuse_categorical(da, dims, var: str) -> None:
    """Categorical dimensions are never averaged: Hebbian and PL points are different
    systems, not samples of one."""
    bad = [d for d in dims if da.sizes[d] > 1 and _is_categorical(da, d)]
    if bad:
        values = {d: da[d].values.tolist() for d in bad}
        raise ValueError(
            f"{var!r}: {', '.join(bad)} is a categorical axis ({values}); its points are not "
            "averaged together: fix one value (fixed={...}), draw it (x, y, hue) or make it "
            "panels"
        )


def _evenly(steps: np.ndarray) -> bool:
    return bool(np.allclose(steps, steps[0], rtol=1e-3, atol=0))


def _cells(values: np.ndarray, log: bool | None) -> tuple[np.ndarray, np.ndarray, str, bool]:
    """How a heat map lays out one axis: (centres, cell edges, scale, labelled by index).

    Evenly spaced numbers get cells centred on them, half a step either side; geometrically
    spaced positive numbers (or ``log=True``) the same on a log scale. Anything else (labels,
    two values, uneven steps, or cells that would cross zero) gets one equal cell per
    value, labelled with it: a λ axis [1, 8] is two cells, not cells from -2.5 to 11.5.
    """
    index = np.arange(values.size, dtype=float)
    as_index = (index, np.arange(values.size + 1) - 0.5, "linear", True)
    if values.dtype.kind not in "iuf" or values.size < 2:
        return as_index
    v = values.astype(float)
    if not np.all(np.diff(v) > 0):
        return as_index
    positive = bool(np.all(v > 0))
    auto = log is None and values.size >= 3 and positive
    spaced = auto and _evenly(np.diff(np.log(v))) and not _evenly(np.diff(v))
    geometric = positive and (log or spaced or (auto and _is_log(v)))
    if geometric:
        mids = np.sqrt(v[1:] * v[:-1])
        first, last = v[0] ** 2 / mids[0], v[-1] ** 2 / mids[-1]
        return v, np.concatenate([[first], mids, [last]]), "log", False
    if log is None and values.size >= 3 and _evenly(np.diff(v)):
        step = v[1] - v[0]
        edges = np.concatenate([v - step / 2, [v[-1] + step / 2]])
        if not (np.all(v > 0) and edges[0] <= 0) and not (np.all(v < 0) and edges[-1] >= 0):
            return v, edges, "linear", False
    return as_index


def _position(layout, values: np.ndarray, value) -> float:
    """Where a coordinate value sits on an axis laid out by :func:`_cells`."""
    by_index = layout[3]
    if not by_index:
        return float(value)
    return float(next(i for i, v in enumerate(values) if _same(v, value)))


def _heat_map(ax, da, x: str, y: str, norm, cmap, colorbar: bool, log, var: str):
    """``da`` over (y, x) as cells laid out by :func:`_cells`; returns the two layouts."""
    layouts = {}
    for axis, dim in (("x", x), ("y", y)):
        layouts[dim] = layout = _cells(da[dim].values, log)
        centres, _, scale, by_index = layout
        getattr(ax, f"set_{axis}scale")(scale)
        if by_index:
            labels = [_label(v) for v in da[dim].values.tolist()]
            getattr(ax, f"set_{axis}ticks")(centres, labels)
        getattr(ax, f"set_{axis}label")(dim)
    mesh = ax.pcolormesh(
        layouts[x][1], layouts[y][1], da.transpose(y, x).values, norm=norm, cmap=cmap
    )
    if colorbar:
        ax.figure.colorbar(mesh, ax=ax, label=var)
    return layouts


GAIN_FLOOR = -30.0  # gains in standard errors are coloured down to here (10x the level)


def _color_norm(var: str, vmin: float, vmax: float):
    """The colour scale of a variable: a gain in standard errors (``*gain_z``) is blue below
    the significance level, 3, and red above it, down to :data:`GAIN_FLOOR`."""
    from matplotlib.colors import Normalize, TwoSlopeNorm

    if var.endswith("gain_z"):  # ref_gain_z of an experiment scan
        low = min(max(vmin, GAIN_FLOOR), SIGNIFICANT_Z - 1)
        return TwoSlopeNorm(SIGNIFICANT_Z, low, max(vmax, SIGNIFICANT_Z + 1)), "RdBu_r"
    return Normalize(vmin, vmax if vmax > vmin else vmin + 1), "viridis"


def _same(a, b) -> bool:
    """Two coordinate values are the same (numbers up to rounding)."""
    if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)):
        return bool(np.isclose(float(a), float(b)))
    return str(a) == str(b)


def _marked_here(mark: Mapping, da, fixed: Mapping, drawn: tuple[str, ...]) -> bool:
    """Whether the ``mark`` point lies in a map of ``da`` over the ``drawn`` dimensions:
    every drawn one is numeric and set by the mark, every fixed one agrees with it."""
    numeric = all(d in mark and da[d].dtype.kind in "iuf" for d in drawn)
    return numeric and all(_same(mark[d], v) for d, v in fixed.items() if d in mark)


def phase_diagram(
    ds,
    var: str,
    x: str | None = None,
    y: str | None = None,
    *,
    fixed: Mapping[str, Any] | None = None,
    reduce: str = "mean",
    ax=None,
    log: bool | None = None,
    mark: Mapping[str, Any] | None = None,
    limits: tuple[float, float] | None = None,
    colorbar: bool = True,
):
    """Draw the variable ``var`` of a collected scan ``ds`` as a heat map over ``x``, ``y``.

    Parameters
    ----------
    x, y : str, optional
        Dimensions on the horizontal and vertical axes; default: the first two with more
        than one value (after ``fixed``). With only one, a line is drawn instead. ``"a*b"``
        puts the product of two numeric dimensions on an axis (``"fit.norm*dynamics.lam_eval"``):
        the map is then drawn as one square per point.
    fixed : mapping, optional
        ``dimension -> value`` to hold fixed (the nearest value on a numeric axis;
        ``{"t": 10}`` picks a time of a curve).
    reduce : {"mean", "median", "min", "max"}
        How the other numeric dimensions (seeds, say) are reduced; NaN (missing points)
        skipped. A categorical dimension (``couplings = ["hebbian", "pl"]``) is never
        reduced: ``ValueError`` unless it is drawn or fixed (:func:`draw_phase_diagrams`
        makes it panels).
    ax : matplotlib Axes, optional
        Where to draw; default: a new figure (``ax.figure`` to save it).
    log : bool, optional
        Logarithmic axes; default: where a dimension's values are geometrically spaced.
        The cells of a heat map are centred on the values and never cross zero; labels,
        two values or uneven steps get one equal cell per value, labelled with it.
    mark : mapping, optional
        ``dimension -> value`` of a point to mark with a star (the paper's, say); drawn
        where its other dimensions agree with ``fixed``.
    limits : (float, float), optional
        The colour scale (default: the data's range); a ``*gain_z`` variable is coloured
        around 3, the level at which a gain is significant.
    colorbar : bool

    Returns
    -------
    matplotlib.axes.Axes
    """
    check_choice(reduce, "reduce", REDUCTIONS)
    da = _selected(ds, var, fixed)
    xs, ys = _factors(x), _factors(y)
    for dim in (*xs, *ys):
        if dim not in da.dims:
            raise ValueError(f"{dim!r} is not a dimension of {var!r}: {list(da.dims)}")
    free = [d for d in da.dims if da.sizes[d] > 1 and d not in (*xs, *ys)]
    xs = xs or ((free.pop(0),) if free else ())
    ys = ys or ((free.pop(0),) if free else ())
    if not xs:
        raise ValueError(f"{var!r} has no dimension with more than one value to draw over")
    reduced = [d for d in da.dims if d not in (*xs, *ys)]
    _refuse_categorical(da, reduced, var)
    da = getattr(da, reduce)(dim=reduced, skipna=True) if reduced else da
    ax = ax if ax is not None else new_figure((5.2, 4.2)).subplots()
    norm, cmap = _color_norm(var, *(limits or _finite_range(da.values)))
    layouts = None
    if len(xs) == 1 and len(ys) <= 1:  # a plain map (or a line)
        x, y = xs[0], ys[0] if ys else None
        if y is None:
            scale = {}
            if not _is_categorical(da, x) and (log if log is not None else _is_log(da[x].values)):
                scale["xscale"] = "log"
            da.plot(x=x, ax=ax, marker="o", **scale)
        else:
            layouts = _heat_map(ax, da, x, y, norm, cmap, colorbar, log, var)
    else:  # a product on an axis: one square per point
        flat = da.stack(point=[*dict.fromkeys((*xs, *ys))]).dropna("point")
        px = np.prod([flat[d].values.astype(float) for d in xs], axis=0)
        py = np.prod([flat[d].values.astype(float) for d in ys], axis=0)
        drawn = ax.scatter(px, py, c=flat.values, marker="s", s=70, norm=norm, cmap=cmap)
        for axis, values in (("x", px), ("y", py)):
            if log if log is not None else _is_log(np.unique(values)):
                getattr(ax, f"set_{axis}scale")("log")
        ax.set_xlabel(" × ".join(xs))
        ax.set_ylabel(" × ".join(ys))
        if colorbar:
            ax.figure.colorbar(drawn, ax=ax, label=var)
    if mark and ys and _marked_here(mark, da, fixed or {}, (*xs, *ys)):
        if layouts is not None:
            at = [_position(layouts[d[0]], da[d[0]].values, mark[d[0]]) for d in (xs, ys)]
        else:
            at = [np.prod([float(mark[d]) for d in dims]) for dims in (xs, ys)]
        ax.plot(*at, marker="*", ms=15, mfc="gold", mec="black", ls="none", label="marked")
    notes = [f"{d} = {v}" for d, v in (fixed or {}).items()]
    notes += [f"{reduce} over {', '.join(reduced)}"] if reduced else []
    ax.set_title(var + (f"\n({'; '.join(notes)})" if notes else ""), fontsize="medium")
    return ax


def phase_panels(
    ds,
    var: str,
    x: str | None,
    y: str | None,
    panels: Sequence[str],
    *,
    fixed: Mapping[str, Any] | None = None,
    reduce: str = "mean",
    mark: Mapping[str, Any] | None = None,
):
    """A figure of :func:`phase_diagram` of ``var``, one panel per value of the ``panels``
    dimensions (rows, then columns), on one colour scale.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`spinsa.scan.collect`.
    var, x, y, fixed, reduce, mark
        As in :func:`phase_diagram`.
    panels : sequence of str
        One or two dimensions of ``ds`` (``ValueError`` otherwise).

    Returns
    -------
    matplotlib.figure.Figure
        ``len(rows) × len(columns)`` panels and one colour bar.
    """
    dims = list(panels)
    if not 1 <= len(dims) <= 2:
        raise ValueError(f"panels takes one or two dimensions (rows, columns), got {dims}")
    for dim in dims:
        if dim not in ds.dims:
            raise ValueError(f"panels: {dim!r} is not a dimension; those: {list(ds.dims)}")
    rows = ds[dims[0]].values.tolist()
    cols = ds[dims[1]].values.tolist() if len(dims) > 1 else [None]
    limits = _finite_range(_selected(ds, var, fixed).values)
    fig = new_figure((4.4 * len(cols) + 0.8, 3.6 * len(rows)))
    axes = fig.subplots(len(rows), len(cols), squeeze=False)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            at = {dims[0]: row, **({dims[1]: col} if col is not None else {})}
            ax = phase_diagram(
                ds, var, x, y, fixed={**dict(fixed or {}), **at}, reduce=reduce, ax=axes[i, j],
                mark=mark, limits=limits, colorbar=False,
            )  # fmt: skip
            title = ", ".join(f"{_short(d, at)} = {v}" for d, v in at.items())
            ax.set_title(title, fontsize="medium")
    # the axes phase_diagram drew (x, y default to the free dimensions): a line when only x
    first = _selected(ds, var, {**dict(fixed or {}), **{d: ds[d].values[0] for d in dims}})
    xs, ys = _factors(x), _factors(y)
    free = [d for d in first.dims if first.sizes[d] > 1 and d not in (*xs, *ys)]
    xs = xs or ((free.pop(0),) if free else ())
    ys = ys or ((free.pop(0),) if free else ())
    if ys:  # a heat map: one colour scale for every panel (lines have none)
        norm, cmap = _color_norm(var, *limits)
        from matplotlib.cm import ScalarMappable

        fig.colorbar(ScalarMappable(norm, cmap), ax=axes, label=var)
    notes = [f"{d} = {v}" for d, v in (fixed or {}).items()]
    drawn = {*xs, *ys, *dims, *(fixed or {})}
    if any(d not in drawn for d in ds[var].dims if d != "t"):
        notes.append(f"{reduce} over the other axes")
    fig.suptitle(f"{var} ({'; '.join(notes)})" if notes else var, fontsize=10)
    return fig


def line_panels(ds, var: str, x: str, hue: str | None = None, panels: Sequence[str] = (), *,
                fixed: Mapping[str, Any] | None = None, reference: str | None = None):  # fmt: skip
    """``var`` against ``x`` with error bars, one line per value of ``hue``, one panel per
    value of the ``panels`` dimensions (rows, then columns).

    The error bars are ``<var>_sem`` when ``ds`` has it (standard errors). Dimensions
    neither drawn nor fixed (seeds) are averaged over, and their standard errors combined
    as those of a mean of independent estimates. ``reference``: a variable drawn as a
    dotted line of the same colour (``paramagnetic_overlap``: the overlap of random spins).

    Parameters
    ----------
    ds : xarray.Dataset
        A scan's collected results (:func:`spinsa.scan.collect`), one dimension per axis.
    var : str
        The numeric variable drawn on the y axis.
    x : str
        The dimension on the x axis.
    hue : str, optional
        A dimension drawn as one line per value.
    panels : sequence of str
        At most two dimensions: one panel per value (rows, then columns).
    fixed : mapping of str to value, optional
        Dimensions held at one value (the nearest one for numbers).
    reference : str, optional
        A variable drawn dotted, in the colour of each line.

    Returns
    -------
    matplotlib.figure.Figure
    """
    dims = list(panels)
    if len(dims) > 2:
        raise ValueError(f"panels takes at most two dimensions (rows, columns), got {dims}")
    for dim in [x, *([hue] if hue else []), *dims]:
        if dim not in ds.dims:
            raise ValueError(f"{dim!r} is not a dimension; those: {list(ds.dims)}")
    da = _selected(ds, var, fixed)
    sem = _selected(ds, f"{var}_sem", fixed) if f"{var}_sem" in ds.data_vars else None
    ref = _selected(ds, reference, fixed) if reference else None
    over = [d for d in da.dims if d not in {x, hue, *dims}]
    _refuse_categorical(da, over, var)
    if over:
        n = np.prod([da.sizes[d] for d in over])
        da = da.mean(over)
        sem = None if sem is None else np.sqrt((sem**2).sum(over)) / n
        ref = None if ref is None else ref.mean([d for d in over if d in ref.dims])
    rows = ds[dims[0]].values.tolist() if dims else [None]
    cols = ds[dims[1]].values.tolist() if len(dims) > 1 else [None]
    hues = ds[hue].values.tolist() if hue else [None]
    fig = new_figure((3.6 * len(cols) + 0.6, 3.0 * len(rows) + 0.4))
    axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=True)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            ax = axes[i, j]
            at = dict(zip(dims, [v for v in (row, col) if v is not None], strict=True))
            for k, h in enumerate(hues):
                where = {**at, **({hue: h} if hue else {})}
                y = da.sel(where).transpose(x).values
                err = None if sem is None else sem.sel(where).transpose(x).values
                label = None if hue is None else f"{_short(hue, ds.dims)} = {_label(h)}"
                ax.errorbar(ds[x].values, y, yerr=err, marker="o", ms=3, capsize=2,
                            color=f"C{k}", label=label)  # fmt: skip
                if ref is not None:
                    r = ref.sel({d: v for d, v in where.items() if d in ref.dims})
                    r = r.transpose(*[d for d in (x,) if d in r.dims]).values
                    ax.plot(ds[x].values, np.broadcast_to(r, y.shape), ":", color=f"C{k}")
            title = ", ".join(f"{_short(d, ds.dims)} = {v}" for d, v in at.items())
            first = (i, j) == (0, 0)
            finish(ax, title, xlabel=x if i == len(rows) - 1 else "",
                   ylabel=var if j == 0 else None, legend=7 if first and hue else None)  # fmt: skip
    return fig


def _label(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _categorical_left(ds, shown) -> list[str]:
    """The categorical scan dimensions with more than one value that a figure leaves out."""
    return [
        d for d in ds["status"].dims
        if d not in shown and ds.sizes[d] > 1 and _is_categorical(ds, d)
    ]  # fmt: skip


def _short(dim: str, others) -> str:
    """The last part of a dotted dimension name, unless another dimension ends alike."""
    last = dim.rsplit(".", 1)[-1]
    return dim if sum(d.rsplit(".", 1)[-1] == last for d in others) > 1 else last


def curves_figure(ds, points: Sequence[Mapping[str, Any]], tasks=("masked", "denoise"), fixed=None):
    """Error against t at a few points of a collected experiment scan, beside the best
    reference of each (dashed), one panel per task.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`spinsa.scan.collect` of an experiment scan (``<task>.error`` over ``t``, ...).
    points : sequence of mapping
        ``dimension -> value``; the dimensions a point leaves out (seeds) are averaged
        over, their standard errors combined.
    tasks : sequence of str
    fixed : mapping, optional
        Values every point shares (the labels leave them out).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = new_figure((5.2 * len(tasks), 4.0))
    colors = [f"C{i % 10}" for i in range(len(points))]
    for ax, task in zip(np.atleast_1d(fig.subplots(1, len(tasks))), tasks, strict=True):
        for point, color in zip(points, colors, strict=True):
            quantities = ("error", "error_sem", "reference_error", "reference_sem")
            names = [f"{task}.{q}" for q in quantities]
            at = {**dict(fixed or {}), **point}
            error, error_sem, ref, ref_sem = (_selected(ds, name, at) for name in names)
            other = [d for d in error.dims if d != "t"]  # averaged: seeds, say
            n = error.notnull().sum(other).values  # (T + 1,): the points that are done
            label = ", ".join(f"{_short(d, point)}={v}" for d, v in point.items())
            sem = np.sqrt((error_sem**2).sum(other).values) / np.maximum(n, 1)
            band(ax, ds["t"].values, error.mean(other).values, sem, label, color)
            n_ref = max(int(ref.notnull().sum()), 1)
            ref_sem = float(np.sqrt((ref_sem**2).sum()) / n_ref)
            level(ax, float(ref.mean()), ref_sem, None, color, lw=0.9)
        finish(ax, f"{task}: error (solid) and best reference (dashed)", ylabel="MSE", legend=6)
    return fig


def capacity_figure(
    ds,
    var: str = "retrieved_fraction",
    x: str = "patterns.alpha",
    hue: str | None = "couplings",
    *,
    over: str = "seed",
    level: float = 0.5,
    fixed: Mapping[str, Any] | None = None,
    reference: float | None = HOPFIELD_ALPHA_C,
    reference_label: str = "Hopfield α_c = 0.138 (d = 1, N → ∞)",
    n_boot: int = 1000,
    ax=None,
):
    """A capacity curve: ``var`` against the load ``x``, one curve per value of ``hue``,
    with the critical load α_c of each (:func:`spinsa.analysis.critical_load`) and its
    bootstrap error bar over the ``over`` dimension (the seeds).

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`spinsa.scan.collect` of a synthetic scan over ``patterns.alpha`` (or
        a zipped load axis) and ``seed``.
    var, x, hue, over : str
        The retrieval measure, the load, the curves (None: one) and the seeds.
    level : float
        α_c is where the mean of ``var`` over the seeds first falls below it.
    fixed : mapping, optional
        Values of the other dimensions (every other dimension must be fixed or have one
        value: nothing else is averaged).
    reference : float or None
        A reference critical load drawn as a vertical dotted line (default: the Hopfield
        model's, a scale for d = 1 and not a prediction for this model; docs/capacity.md).
    reference_label : str
    n_boot : int
        Bootstrap resamplings of the seeds.
    ax : matplotlib Axes, optional

    Returns
    -------
    (matplotlib.axes.Axes, dict)
        The axes, and ``hue value -> CriticalLoad`` (key None without ``hue``).
    """
    da = _selected(ds, var, fixed)
    drawn = [x, over, *([hue] if hue else [])]
    for dim in drawn:
        if dim not in da.dims:
            raise ValueError(f"{dim!r} is not a dimension of {var!r}: {list(da.dims)}")
    left = [d for d in da.dims if d not in drawn and da.sizes[d] > 1]
    if left:
        raise ValueError(f"capacity_figure: fix the other dimensions {left} (fixed={{...}})")
    da = da.squeeze([d for d in da.dims if d not in drawn])
    ax = ax if ax is not None else new_figure((5.4, 4.0)).subplots()
    alpha = da[x].values.astype(float)
    loads = {}
    for k, h in enumerate(da[hue].values.tolist() if hue else [None]):
        values = (da.sel({hue: h}) if hue else da).transpose(x, over).values
        n = np.isfinite(values).sum(axis=1)
        with np.errstate(all="ignore"):
            mean = np.nanmean(values, axis=1)
            sem = np.nanstd(values, axis=1, ddof=1) / np.sqrt(n)
        found = loads[h] = critical_load(alpha, values, level, n_boot=n_boot)
        label = "" if h is None else f"{_short(hue, da.dims)} = {_label(h)}: "
        label += (
            f"α_c = {found.alpha_c:.3f} ± {found.sem:.3f}" if found.where == "inside"
            else f"α_c {'>' if found.where == 'above' else '<'} the loads drawn"
        )  # fmt: skip
        ax.errorbar(alpha, mean, yerr=sem, marker="o", ms=3, capsize=2, color=f"C{k}",
                    label=label)  # fmt: skip
        if found.where == "inside":
            err = np.nan_to_num(found.sem)
            ax.axvspan(found.alpha_c - err, found.alpha_c + err, color=f"C{k}", alpha=0.2, lw=0)
            ax.axvline(found.alpha_c, color=f"C{k}", lw=0.9, ls="--")
    ax.axhline(level, color="0.5", lw=0.8, ls=":")
    if reference is not None:
        ax.axvline(reference, color="black", lw=1.0, ls=":", label=reference_label)
    n_seeds = da.sizes[over]
    title = f"{var}: mean ± s.e. over {n_seeds} {over}s; α_c at {level:g} (bootstrap s.e.)"
    finish(ax, title, xlabel=f"load α = P/N ({x})", ylabel=var, legend=7)
    return ax, loads


def best_point(ds, var: str, over: Sequence[str] = (), fixed=None) -> dict[str, Any]:
    """Where a scan did best: the coordinates of the largest ``var``.

    Parameters
    ----------
    ds : xarray.Dataset
    var : str
    over : sequence of str
        Dimensions averaged over first (seeds).
    fixed : mapping, optional
        Held fixed, and left out of the result.

    Returns
    -------
    dict
        ``dimension -> value``. ``ValueError`` when ``var`` has no finite value there.
    """
    da = _selected(ds, var, fixed)
    da = da.mean(list(over)) if over else da
    if not np.isfinite(da.values).any():
        raise ValueError(f"{var!r} has no finite value: no point to pick")
    at = np.unravel_index(int(np.nanargmax(da.values)), da.shape)
    return {d: np.asarray(da[d].values[i]).item() for d, i in zip(da.dims, at, strict=True)}


def draw_phase_diagrams(
    ds,
    out_dir: str | os.PathLike,
    variables: Sequence[str] | None = None,
    *,
    x: str | None = None,
    y: str | None = None,
    fixed: Mapping[str, Any] | None = None,
    reduce: str = "mean",
    fmt: str = "png",
    dpi: int = 120,
    panels: Sequence[str] | None = None,
    mark: Mapping[str, Any] | None = None,
    curves: Sequence[Mapping[str, Any]] | None = None,
) -> list[Path]:
    """Draw :func:`phase_diagram` of every variable into ``out_dir/<variable>.<fmt>``.

    ``variables`` defaults to those of :data:`DIAGRAM_VARIABLES` that ``ds`` has (also as
    ``<task>.<name>``), else to its scalar variables (at most 12); ``x``, ``y``, ``fixed``,
    ``reduce`` and ``mark`` are as in :func:`phase_diagram`. With ``panels`` (one or two
    dimensions), each figure holds one panel per value (:func:`phase_panels`). With
    ``curves`` (points, ``dimension -> value``, within ``fixed``), ``curves.<fmt>`` shows
    their error curves (:func:`curves_figure`). Returns the paths of the files written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if variables is None:
        dims = set(ds["status"].dims)  # the scan's own, without t or *_index
        scalars = [
            v
            for v in ds.data_vars
            if v not in ("status", "key") and set(ds[v].dims) <= dims and ds[v].dtype.kind in "biuf"
        ]
        wanted = [v for q in DIAGRAM_VARIABLES for v in scalars if v == q or v.endswith("." + q)]
        variables = wanted or scalars[:12]
    if not panels:  # categorical axes are never averaged: one panel per value
        left = _categorical_left(ds, {*_factors(x), *_factors(y), *(fixed or {})})
        if len(left) > 2:
            raise ValueError(f"categorical axes {left}: fix all but two of them (fix = {{...}})")
        panels = left or None
    paths = []
    for var in variables:
        if panels:
            fig = phase_panels(ds, var, x, y, panels, fixed=fixed, reduce=reduce, mark=mark)
        else:
            fig = new_figure((5.2, 4.2))
            phase_diagram(ds, var, x, y, fixed=fixed, reduce=reduce, ax=fig.subplots(), mark=mark)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", var)
        paths.append(save_figure(fig, out_dir / f"{name}.{fmt}", dpi=dpi))
    if curves:
        fig = curves_figure(ds, curves, fixed=fixed)
        paths.append(save_figure(fig, out_dir / f"curves.{fmt}", dpi=dpi))
    return paths


LINE_KEYS = ("x", "hue", "panels", "variables", "reference")


def _draw_lines(ds, out_dir, lines: Mapping[str, Any], fixed, fmt: str) -> list[Path]:
    """``lines_<var>.<fmt>``: :func:`line_panels` of each of ``lines["variables"]``."""
    unknown = sorted(set(lines) - set(LINE_KEYS))
    if unknown or "x" not in lines:
        raise ValueError(f"[collect] lines needs x and takes {', '.join(LINE_KEYS)}; got "
                         f"{sorted(lines)}")  # fmt: skip
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hue, panels = lines.get("hue"), list(lines.get("panels", ()))
    left = _categorical_left(ds, {lines["x"], hue, *panels, *(fixed or {})})
    if left and hue is None:  # categorical axes are never averaged: a line each
        hue = left.pop(0)
    panels += left
    paths = []
    for var in lines.get("variables", ["overlap"]):
        ref = lines.get("reference")
        fig = line_panels(ds, var, lines["x"], hue, panels,
                          fixed=fixed, reference=ref and ref.format(var=var))  # fmt: skip
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", var)
        paths.append(save_figure(fig, out_dir / f"lines_{name}.{fmt}", dpi=120))
    return paths


def draw_scan_figures(ds, out_dir: str | os.PathLike, table: Mapping[str, Any]) -> list[Path]:
    """The figures a scan's ``[collect]`` table asks for (docs/scans.md).

    Parameters
    ----------
    ds : xarray.Dataset
    out_dir : path
    table : mapping
        ``x``, ``y``, ``variables``, ``fix``, ``reduce``, ``format``, ``panels``, ``mark``
        (:func:`draw_phase_diagrams`), ``curves`` (points whose error curves are drawn)
        and ``best`` (variables whose best point, :func:`best_point` averaged over the
        dimensions not drawn, is added to the curves; skipped with a warning when none);
        ``lines``: a table of :data:`LINE_KEYS` for :func:`line_panels`, one file
        ``lines_<var>.<fmt>`` per variable (without ``x`` and ``y``, only these); its
        ``reference`` may name the variable as ``{var}``: ``"paramagnetic_{var}"``.

    Returns
    -------
    list of Path
        The files written.
    """
    fixed = dict(table.get("fix", {}))
    x, y, panels = table.get("x"), table.get("y"), table.get("panels")
    curves = [dict(c) for c in table.get("curves", [])]
    shown = {*_factors(x), *_factors(y), *(panels or ()), *fixed}
    categorical = _categorical_left(ds, shown)  # a best point picks one of their values
    over = [d for d in ds["status"].dims if d not in shown and d not in categorical]
    for var in table.get("best", []):
        try:
            curves.append(best_point(ds, var, over, fixed))
        except (ValueError, KeyError) as err:  # nothing finite there yet: the others are drawn
            warnings.warn(f"no best point of {var}: {err}", stacklevel=2)
    lines = dict(table.get("lines", {}))
    paths = [] if not lines else _draw_lines(ds, out_dir, lines, fixed, table.get("format", "png"))
    if lines and x is None and y is None:  # a study of curves only
        return paths
    return paths + draw_phase_diagrams(
        ds,
        out_dir,
        table.get("variables"),
        x=x,
        y=y,
        fixed=fixed,
        reduce=table.get("reduce", "mean"),
        fmt=table.get("format", "png"),
        panels=panels,
        mark=table.get("mark"),
        curves=curves,
    )
