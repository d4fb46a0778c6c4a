"""HDF5 files of spinsa: every file the package writes or reads goes through here.

One self-describing file per run, fit, evaluation or scan point (layout: :mod:`spinsa.io.schema`).
New files are written atomically (temporary file, then rename); groups are added to a file
in place and become visible only when complete (:mod:`spinsa.io.hdf5` says how, and what a
killed writer can and cannot do). Writers refuse to overwrite unless asked; reads refuse
anything that is not a complete spinsa file of a schema this version knows, with a
:class:`SpinsaFileError` that says what is wrong. Every byte a file holds is under a
checksum (Fletcher-32 on the data, HDF5's own on the metadata): a changed byte is an error
on read, and :func:`verify` reads a whole file to check them all.

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
    "read_group",
    "save_trajectory",
    "verify",
    "write_file",
    "write_group",
]
