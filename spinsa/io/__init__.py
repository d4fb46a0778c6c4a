"""HDF5 files of spinsa: every file the package writes or reads goes through here.

One self-describing file per run, fit, evaluation or scan point (layout: :mod:`spinsa.io.schema`),
written atomically or, for an added group, in place and visible only when complete; every
byte under a checksum (:mod:`spinsa.io.hdf5` says how, and what a killed writer can do).
Writers refuse to overwrite unless asked; reads refuse anything but a complete spinsa file
of a schema this version knows, with a :class:`SpinsaFileError` that says what is wrong.

::

    from spinsa import io
    io.write_file("fit.h5", {"J": J, "loss": losses}, {"n_train": 10_000},
                  kind="fit", config=fit_config, seeds={"init": 0})
    io.write_group("fit.h5", "analysis/overlaps", {"m": m}, {"lam": 1.0})
    f = io.read("fit.h5")                      # attrs, config, table of contents
    J = f.array("J")                           # float32
    io.save_trajectory("run.h5", traj, J=J)    # a spinsa.run(...) result
    x_T = io.read_array("run.h5", "trajectory/states", -1)   # one record, from disk
    io.verify("run.h5")                        # every checksum; SpinsaFileError if changed
"""

from spinsa.io.hdf5 import (
    RunFile,
    check_file,
    load_trajectory,
    open_file,
    read,
    read_array,
    read_attrs,
    read_group,
    save_trajectory,
    verify,
    write_file,
    write_group,
)
from spinsa.io.schema import SCHEMA, SpinsaFileError

__all__ = [
    "SCHEMA",
    "RunFile",
    "SpinsaFileError",
    "check_file",
    "load_trajectory",
    "open_file",
    "read",
    "read_array",
    "read_attrs",
    "read_group",
    "save_trajectory",
    "verify",
    "write_file",
    "write_group",
]
