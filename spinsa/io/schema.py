"""What a spinsa HDF5 file holds, and how Python values become HDF5 attributes.

Layout of schema ``spinsa/1`` (one file per run, fit, evaluation or scan point):

- Root attributes

  ``schema``          ``"spinsa/1"``; readers refuse other prefixes and newer versions
  ``kind``            what the file is: ``"run"``, ``"fit"``, ``"evaluation"``, ``"scan-point"``...
  ``spinsa_version``  version of spinsa that wrote the file
  ``numpy_version``   version of numpy that wrote it (random streams depend on it)
  ``created``         ISO 8601 time in UTC, e.g. ``"2024-10-03T14:07:21+00:00"``
  ``host``            ``socket.gethostname()`` of the writer
  ``config_json``     the whole config as one JSON string: the exact round trip
  ``config_type``     ``"module.Class"`` of the config when it was a dataclass
  ``config.<key>``    the config again, one attribute per leaf, nested sections flattened with
                      dots (``config.fit.lam``), for reading in ``h5dump`` or HDFView
  ``seeds.<name>``    every seed that went into the file's content
  anything else       the caller's own attributes

- Datasets and groups as the caller names them (``trajectory/states``, ``J``,
  ``analysis/overlaps/m``...). A dataset whose last name is ``J`` holds couplings and is
  stored float32 whatever dtype it came in; every other array keeps its dtype.

- Groups added later with :func:`spinsa.io.write_group` carry ``created`` and
  ``spinsa_version`` attributes of their own.

Attribute values. HDF5 attributes hold strings, numbers and numeric arrays natively; those
are stored as they are. Everything else (``None``, lists, tuples, dicts, lists of strings)
is stored as a string ``"json:<JSON text>"`` and decoded on reading, so ``None`` comes back
``None`` and a list comes back a list (a tuple comes back a list). A genuine string that
starts with ``"json:"`` is itself JSON-encoded, so decoding is never ambiguous. Inside JSON,
numpy scalars and arrays become numbers and lists, and paths become strings.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import socket
from datetime import datetime, timezone
from typing import Any

import numpy as np

from spinsa._config import config_to_dict

SCHEMA_NAME = "spinsa"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"
JSON_PREFIX = "json:"
COUPLINGS_NAME = "J"  # a dataset with this last name is stored float32
COUPLINGS_DTYPE = np.dtype(np.float32)

PROVENANCE_KEYS = ("schema", "kind", "spinsa_version", "numpy_version", "created", "host")
RESERVED_KEYS = (*PROVENANCE_KEYS, "config_json", "config_type")
RESERVED_PREFIXES = ("config.", "seeds.")
GROUP_PROVENANCE_KEYS = ("created", "spinsa_version")


class SpinsaFileError(ValueError):
    """A path that is not a readable spinsa file.

    ``reason`` says which case it is, for code that wants to react (a scan re-runs a point
    whose file is ``"corrupt"``):

    - ``"missing"``: no file at that path;
    - ``"not-hdf5"``: not an HDF5 file at all (text, pickle, npz, a directory...);
    - ``"corrupt"``: HDF5 signature present but the file cannot be read (truncated copy), or
      a checksum fails (bytes changed after spinsa wrote them), or a dataset that the layout
      of the file's kind requires is missing or has the wrong shape (an edit outside spinsa,
      checksum and all: :func:`spinsa.io.results.check_evaluations`);
    - ``"foreign"``: a valid HDF5 file that spinsa did not write (no ``schema = spinsa/<n>``);
    - ``"newer-schema"``: written by a newer spinsa with a schema this version cannot read.
    """

    REASONS = ("missing", "not-hdf5", "corrupt", "foreign", "newer-schema")

    def __init__(self, message: str, reason: str):
        if reason not in self.REASONS:
            raise ValueError(f"reason must be one of {self.REASONS}, got {reason!r}")
        super().__init__(message)
        self.reason = reason


def check_schema(value: Any, path: os.PathLike | str) -> None:
    """Raise :class:`SpinsaFileError` unless ``value`` (the root ``schema`` attr) is readable."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value is None:
        raise SpinsaFileError(
            f"{path} is an HDF5 file but not a spinsa file: it has no root attribute 'schema'. "
            "Open it with h5py directly, or write it again with spinsa.io.write_file.",
            "foreign",
        )
    name, _, version = str(value).partition("/")
    if name != SCHEMA_NAME or not version.isdigit() or int(version) < 1:
        raise SpinsaFileError(
            f"{path} is an HDF5 file but not a spinsa file: its schema attribute is {value!r}, "
            f"not '{SCHEMA_NAME}/<n>'. Open it with h5py directly.",
            "foreign",
        )
    if int(version) > SCHEMA_VERSION:
        raise SpinsaFileError(
            f"{path} was written with schema {value!r}, newer than the {SCHEMA!r} that this "
            f"spinsa ({spinsa_version()}) reads. Upgrade spinsa: pip install -U spinsa",
            "newer-schema",
        )


def provenance(kind: str) -> dict[str, Any]:
    """The provenance attributes of a new file (every key of ``PROVENANCE_KEYS``)."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a non-empty string such as 'run' or 'fit', got {kind!r}")
    return {
        "schema": SCHEMA,
        "kind": kind,
        "spinsa_version": spinsa_version(),
        "numpy_version": np.__version__,
        "created": now_utc(),
        "host": socket.gethostname(),
    }


def now_utc() -> str:
    """The current time, ISO 8601 in UTC to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def to_json(value: Any) -> str:
    """JSON text of ``value``; numpy scalars/arrays become numbers/lists, paths strings."""
    return json.dumps(value, sort_keys=True, default=json_default)


def encode_attr(value: Any, name: str) -> Any:
    """A value that h5py can store as an attribute; see the module docstring for the rules.

    Raises ``TypeError`` naming the attribute when the value is neither native nor JSON-able.
    """
    if isinstance(value, str):
        return JSON_PREFIX + json.dumps(value) if value.startswith(JSON_PREFIX) else value
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    if isinstance(value, (numbers.Number, np.number)):
        scalar = np.asarray(value)
        if scalar.dtype.kind in "iufc":
            return scalar[()]
        # an int beyond int64 falls through to JSON
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        return value
    try:
        return JSON_PREFIX + to_json(value)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"attribute {name!r}: cannot store a value of type {type(value).__name__} ({err}); "
            "use strings, numbers, numeric arrays, None, or lists and dicts of those"
        ) from None


def decode_attr(value: Any) -> Any:
    """Inverse of :func:`encode_attr`: Python scalars, numpy arrays, JSON decoded."""
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return json.loads(value[len(JSON_PREFIX) :]) if value.startswith(JSON_PREFIX) else value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "OSU":
        return [decode_attr(v) for v in value.tolist()]
    return value


def json_default(value: Any) -> Any:
    """For ``json.dumps(default=...)``: numpy scalars and arrays as lists, paths as strings,
    dataclass configs as their fields (:func:`spinsa._config.config_to_dict`)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def spinsa_version() -> str:
    """The version of the installed spinsa."""
    from spinsa._version import __version__

    return __version__
