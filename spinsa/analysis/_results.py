"""The common shape of analysis results: frozen dataclasses of arrays and scalars.

Every result of :mod:`spinsa.analysis` derives from :class:`AnalysisResult`. Its fields are
either numpy arrays (stored as HDF5 datasets) or scalars, strings, ``None`` and tuples of
those (stored as HDF5 attributes), so a result converts to ``(arrays, attrs)`` and back
without loss: ``type(r).from_arrays(*r.to_arrays_and_attrs()) == r`` field by field.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

__all__ = ["AnalysisResult", "result_class"]

_REGISTRY: dict[str, type[AnalysisResult]] = {}


def result_class(name: str) -> type[AnalysisResult]:
    """The result class registered under ``name`` (its class name)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown analysis result type {name!r}; known types: {known}") from None


def _freeze(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.flags.writeable and a.base is None:
        a.flags.writeable = False
    return a


@dataclasses.dataclass(frozen=True)
class AnalysisResult:
    """Base class: a frozen dataclass that splits into arrays and attributes.

    Subclasses list in ``_arrays`` the names of their array fields (an optional array may be
    ``None``; it is then left out of :meth:`to_arrays`); every other field is an attribute
    (number, string, bool, ``None`` or a tuple of those).
    """

    _arrays: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    def _freeze_arrays(self) -> None:
        """Store every array field as a read-only ndarray (call from ``__post_init__``)."""
        for name in self._arrays:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _freeze(np.array(value)))

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
            elif f.name in attrs:
                value = attrs[f.name]
                if isinstance(value, list):
                    value = tuple(value)
                elif isinstance(value, np.ndarray):
                    value = tuple(value.tolist())
                elif isinstance(value, np.generic):
                    value = value.item()
                kwargs[f.name] = value
        return cls(**kwargs)
