"""What the analysis modules share: the result base class and the argument checks."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from typing import Any, ClassVar

import numpy as np

from spinsa._checks import check_count, check_spins, import_xarray

_REGISTRY: dict[str, type[AnalysisResult]] = {}


def result_class(name: str) -> type[AnalysisResult]:
    """The result class registered under ``name`` (its class name)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown analysis result type {name!r}; known types: {known}") from None


@dataclasses.dataclass(frozen=True)
class AnalysisResult:
    """Base class of every analysis result: a frozen dataclass that splits into arrays (HDF5
    datasets) and attributes (HDF5 attributes) and back without loss:
    ``type(r).from_arrays(r.to_arrays(), r.attrs())`` equals ``r`` field by field.

    The fields annotated ``np.ndarray`` (or ``np.ndarray | None``, an optional array left out
    of :meth:`to_arrays` when ``None``) are the arrays. Every other field is an attribute
    (number, string, bool, ``None`` or a tuple of those; a list or an array is stored as a
    tuple). Each string of ``_same_shape`` names
    (space-separated) arrays that must share one shape where they are not ``None``; a
    subclass checks anything else by extending ``__post_init__``.

    Every result also draws itself, :meth:`plot` (``ax=None``: a new figure; returns the
    axes), and becomes an ``xarray.Dataset`` (:meth:`to_xarray`, dimensions from the shapes
    of the class docstring, :meth:`dims`) or a ``pandas.DataFrame`` (:meth:`to_dataframe`).
    ``_coords`` maps a dimension to the field that labels it (names, times).
    """

    _arrays: ClassVar[tuple[str, ...]] = ()
    _same_shape: ClassVar[tuple[str, ...]] = ()
    # dimension -> the field that labels it (a 1-d array or a tuple of names), in to_xarray
    _coords: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls
        own = cls.__dict__.get("__annotations__", {}).items()
        cls._arrays = tuple(name for name, a in own if "ndarray" in str(a))

    def __post_init__(self):
        for name in self._arrays:  # read-only copies, so that the caller's arrays stay writable
            value = getattr(self, name)
            if value is not None:
                value = np.array(value)
                value.flags.writeable = False
                object.__setattr__(self, name, value)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name not in self._arrays and isinstance(value, (list, np.ndarray)):
                value = value.tolist() if isinstance(value, np.ndarray) else value
                object.__setattr__(self, f.name, tuple(value) if isinstance(value, list) else value)
        for group in self._same_shape:
            present = [(n, getattr(self, n)) for n in group.split() if getattr(self, n) is not None]
            for name, a in present[1:]:
                if a.shape != present[0][1].shape:
                    raise ValueError(
                        f"{name} must have the shape {present[0][1].shape} of {present[0][0]}, "
                        f"got {a.shape}"
                    )

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The array fields, by name (optional arrays that are ``None`` are left out)."""
        return {
            name: np.asarray(getattr(self, name))
            for name in self._arrays
            if getattr(self, name) is not None
        }

    def attrs(self) -> dict[str, Any]:
        """The scalar fields, by name, plus ``result_type`` (the class name)."""
        out: dict[str, Any] = {"result_type": type(self).__name__}
        for f in dataclasses.fields(self):
            if f.name not in self._arrays:
                value = getattr(self, f.name)
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def dims(self) -> dict[str, tuple[str, ...]]:
        """The dimension names of every array, read from the shapes of the class docstring
        (``shape (P, N, d)`` gives ``("P", "N", "d")``, ``shape (T + 1,)`` gives
        ``("T+1",)``); a symbol repeated in one shape gets a suffix (``N, N_2``); an array
        whose documented shape does not fit (or is not documented) gets ``("<name>_0",
        "<name>_1", ...)``, and so does a symbol that would take two sizes."""
        return self._dims_and_sizes(self.to_arrays())[0]

    def _dims_and_sizes(self, arrays) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
        """:meth:`dims` of ``arrays`` (:meth:`to_arrays`), and the size of every dimension."""
        documented = _documented_dims(type(self))
        sizes: dict[str, int] = {}
        out: dict[str, tuple[str, ...]] = {}
        for name, a in arrays.items():
            fits = [_unique(c) for c in documented.get(name, ()) if len(c) == a.ndim]
            dims = fits[0] if fits else None
            if dims is not None and any(
                sizes.get(k, n) != n for k, n in zip(dims, a.shape, strict=True)
            ):
                dims = None
            if dims is None:
                dims = tuple(f"{name}_{k}" for k in range(a.ndim))
            sizes.update(zip(dims, a.shape, strict=True))
            out[name] = dims
        return out, sizes

    def to_xarray(self):
        """The result as an ``xarray.Dataset``: one variable per array, dimensions named as
        in the class docstring (:meth:`dims`), coordinates where the result labels a
        dimension (times, names), the scalar fields as attributes.

        Returns
        -------
        xarray.Dataset
        """
        xr = import_xarray()
        arrays = self.to_arrays()
        dims, sizes = self._dims_and_sizes(arrays)
        data = {name: (dims[name], a) for name, a in arrays.items()}
        coords: dict[str, Any] = {}
        for dim, field in self._coords.items():
            value = getattr(self, field, None)
            if field in data and data[field][0] == (dim,):  # an array that labels its dimension
                coords[field] = data.pop(field)
            elif dim in sizes and value is not None and len(value) == sizes[dim]:
                coords[dim] = list(value)
        attrs = {k: v for k, v in self.attrs().items() if v is not None}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def to_dataframe(self, *names: str):
        """The arrays that share one set of dimensions, as a ``pandas.DataFrame`` (one row per
        element, one column per array, the dimensions as the index).

        Parameters
        ----------
        *names : str
            The arrays to take; by default every array with the dimensions of the first.

        Returns
        -------
        pandas.DataFrame
        """
        ds = self.to_xarray()
        arrays = list(ds.data_vars)
        if not arrays:
            raise ValueError(f"{type(self).__name__} holds no array to tabulate")
        names = names or tuple(n for n in arrays if ds[n].dims == ds[arrays[0]].dims)
        unknown = [n for n in names if n not in arrays]
        if unknown:
            raise ValueError(f"no array {unknown} in {type(self).__name__}; it has {arrays}")
        kinds = {n: ds[n].dims for n in names}
        if len(set(kinds.values())) > 1:
            raise ValueError(
                f"the arrays of one table must share their dimensions, got {kinds}; "
                "ask for fewer, or use to_xarray()"
            )
        return ds[list(names)].to_dataframe()

    def plot(self, ax=None):
        """Draw the result on ``ax`` (a new figure when None) and return the axes.

        Each result class draws its own panel; its ``plot`` says which.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.

        Returns
        -------
        matplotlib.axes.Axes
        """
        raise NotImplementedError(f"{type(self).__name__} does not draw itself yet")

    def to_arrays_and_attrs(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return self.to_arrays(), self.attrs()

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], attrs: dict[str, Any]):
        """Rebuild a result from :meth:`to_arrays` and :meth:`attrs` (extra keys ignored)."""
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in cls._arrays:
                value = arrays.get(f.name)
                kwargs[f.name] = None if value is None else np.asarray(value)
            elif f.name in attrs:  # lists and arrays become tuples in __post_init__
                value = attrs[f.name]
                kwargs[f.name] = value.item() if isinstance(value, np.generic) else value
        return cls(**kwargs)


_SHAPE = re.compile(r"shape\s*(\([^()]*\))")


@functools.cache  # a class's docstring does not change
def _documented_dims(cls) -> dict[str, list[tuple[str, ...]]]:
    """From the ``Attributes`` section of ``cls``'s docstring: for every documented array,
    the dimension tuples of its shapes (``name : ..., shape (P,) or (T, P)``; two names and
    two shapes pair up, ``a, b : ndarray, shape (G, C) and (G,)``)."""
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Attributes\n----------", 1)[-1] if "Attributes\n" in doc else ""
    out: dict[str, list[tuple[str, ...]]] = {}
    lines = section.splitlines() + [""]
    for line, following in zip(lines[:-1], lines[1:], strict=True):
        if not line or line[0].isspace():
            continue
        # "a, b : type, shape (...)", or the names alone with the type on the next line
        left, right = line.split(" : ", 1) if " : " in line else (line, following)
        names = [n.strip() for n in left.split(",")]
        shapes = [m.group(1) for m in _SHAPE.finditer(right)]
        shapes += re.findall(r"(?:or|and)\s+(\([^()]*\))", right)  # "shape (P,) or (T, P)"
        # a symbol or an expression of symbols, spaces removed: "T + 1" -> "T+1"
        tuples = [
            tuple(k.replace(" ", "") for k in sh[1:-1].split(",") if k.strip()) for sh in shapes
        ]
        if len(names) > 1 and len(tuples) == len(names):
            for n, t in zip(names, tuples, strict=True):
                out[n] = [t]
        else:
            for n in names:
                out[n] = tuples
    for group in getattr(cls, "_same_shape", ()):  # "shape like index": a sibling's dims
        members = group.split()
        known = [t for n in members for t in out.get(n, [])]
        for n in members:
            out[n] = out.get(n) or known
    return out


def _unique(dims: tuple[str, ...]) -> tuple[str, ...]:
    """(N, N, d, d) -> (N, N_2, d, d_2): xarray needs distinct dimensions in one array."""
    return tuple(
        k if k not in dims[:n] else f"{k}_{dims[:n].count(k) + 1}" for n, k in enumerate(dims)
    )


def check_states(x, name: str, dtype=None, ndims=(3, 4)) -> np.ndarray:
    """Configurations (P, N, d) or recorded states (T, P, N, d) as :func:`check_spins` sees
    them: finite, real, C-contiguous, float32 unless float64 (or ``dtype``)."""
    x = np.asarray(x)
    if x.ndim not in ndims:
        shapes = {3: "(n_samples, n_tokens, d)", 4: "(n_records, n_samples, n_tokens, d)"}
        expected = " or ".join(shapes[k] for k in ndims)
        raise ValueError(f"{name} must have shape {expected}, got shape {x.shape}")
    return check_spins(x.reshape(-1, *x.shape[-2:]), name, dtype).reshape(x.shape)


def check_patterns(x: np.ndarray, xi, name: str = "xi") -> np.ndarray:
    """Patterns (M >= 1, N, d) with the tokens and spin dimension of ``x``, in its dtype."""
    xi = check_states(xi, name, x.dtype, ndims=(3,))
    if xi.shape[1:] != x.shape[-2:] or xi.shape[0] < 1:
        raise ValueError(
            f"{name} must have shape (n_patterns >= 1, {x.shape[-2]}, {x.shape[-1]}) to match "
            f"the states' (n_tokens, d) = {x.shape[-2:]}, got shape {xi.shape}"
        )
    return xi


def check_times(times, n_records: int, of: str = "") -> np.ndarray:
    """Strictly increasing integer times, one per record; returned as int64."""
    times = np.asarray(times)
    if times.shape != (n_records,) or not np.issubdtype(times.dtype, np.integer):
        raise ValueError(
            f"times must be an integer array of shape ({n_records},), one per record{of}, "
            f"got {times.dtype} array of shape {times.shape}"
        )
    if n_records > 1 and not np.all(np.diff(times) > 0):
        raise ValueError("times must be strictly increasing")
    return times.astype(np.int64)


def bin_edges(bins, lo: float, hi: float) -> np.ndarray:
    """Histogram edges: ``bins`` equal bins from ``lo`` to ``hi``, or ``bins`` as given."""
    if np.ndim(bins) == 0:
        return np.linspace(lo, hi, check_count(bins, "bins", 1) + 1)
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
        raise ValueError("bins must be a positive int or increasing edges (at least 2 values)")
    return edges


def labels(names, K: int) -> list[str]:
    """The K names of a result's curves, or "#0", "#1", ... where it has none."""
    return list(names) if len(names) == K else [f"#{k}" for k in range(K)]
