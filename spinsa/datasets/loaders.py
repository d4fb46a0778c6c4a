"""Images and labels from the cache, whole or as seeded subsets."""

from __future__ import annotations

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa.datasets.sources import SPLITS, dataset_path, fetch, read_cached
from spinsa.datasets.synthetic import _float_dtype


def subsample(
    labels, n: int | None = None, per_class: int | None = None, seed=0, what: str = "data"
) -> np.ndarray:
    """Indices of a seeded subset: ``n`` at random, or ``per_class`` of every class.

    With the same seed a smaller subset is contained in a larger one.

    Parameters
    ----------
    labels : array_like of int, shape (P,)
    n : int, optional
        The first ``n`` of a permutation of ``range(P)`` drawn with ``seed``.
    per_class : int, optional
        The first ``per_class`` of a permutation of each class's indices, classes in
        increasing order, all drawn from one generator.
    seed : int, Generator or None
        Seed of ``np.random.default_rng``.
    what : str
        Name of the data in error messages.

    Returns
    -------
    ndarray of int64, shape (n,) or (n_classes * per_class,)
        Sorted indices (the subset keeps the file order); ``arange(P)`` with neither ``n``
        nor ``per_class``.

    Raises
    ------
    ValueError
        Both ``n`` and ``per_class``; either is 0 or more than exists (says how many do).
    """
    labels = np.asarray(labels)
    total = labels.shape[0]
    if n is not None and per_class is not None:
        raise ValueError("give n or per_class, not both")
    if n is None and per_class is None:
        if total == 0:
            raise ValueError(f"{what} is empty")
        return np.arange(total, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if n is not None:
        n = check_count(n, "n", minimum=0)
        if n == 0 or n > total:
            raise ValueError(f"n must be between 1 and {total} ({what} has {total}), got {n}")
        return np.sort(rng.permutation(total)[:n]).astype(np.int64)
    per_class = check_count(per_class, "per_class", minimum=0)
    classes, counts = np.unique(labels, return_counts=True)
    if per_class == 0 or classes.size == 0 or per_class > counts.min():
        have = ", ".join(
            f"{c}: {k}" for c, k in zip(classes.tolist(), counts.tolist(), strict=True)
        )
        smallest = int(counts.min()) if counts.size else 0
        raise ValueError(
            f"per_class must be between 1 and {smallest} (the smallest class of {what}); got "
            f"{per_class}. Images per class: {have or 'none'}"
        )
    chosen = []
    for c in classes:
        idx = np.flatnonzero(labels == c)
        chosen.append(idx[rng.permutation(idx.size)[:per_class]])
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def _load(name, split, n, per_class, seed, fetch_missing, dtype, return_index):
    check_choice(split, "split", SPLITS)
    dtype = _float_dtype(dtype)
    if fetch_missing and not dataset_path(name).is_file():
        fetch(name)
    arrays = read_cached(name, [f"{split}_images", f"{split}_labels"])
    images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
    idx = subsample(labels, n, per_class, seed, what=f"the {name} {split} split")
    x = images[idx].astype(dtype)
    x /= 255
    y = labels[idx].astype(np.int64)
    return (x, y, idx) if return_index else (x, y)


def load_mnist(
    split: str = "train",
    n: int | None = None,
    per_class: int | None = None,
    seed=0,
    *,
    fetch: bool = False,
    dtype=np.float32,
    return_index: bool = False,
) -> tuple[np.ndarray, ...]:
    """MNIST images in [0, 1] and their labels, from the cache.

    Parameters
    ----------
    split : {"train", "test"}
        60,000 training or 10,000 test images.
    n, per_class : int, optional
        A seeded subset (:func:`subsample`): ``n`` images at random, or ``per_class`` of each
        digit (the paper trains on ``per_class=1000``). Neither: all, in file order.
    seed : int, Generator or None
    fetch : bool
        Fetch MNIST first if the cache has none, instead of raising.
    dtype : float32 or float64
    return_index : bool
        Also return the images' positions in the split (the key of their task streams,
        :func:`spinsa.tasks.task_inputs`).

    Returns
    -------
    images : ndarray, shape (P, 28, 28)
        ``uint8 / 255``: a white digit (1) on black (0).
    labels : ndarray of int64, shape (P,)
    index : ndarray of int64, shape (P,)
        Only with ``return_index``; increasing (subsets keep the file order).

    Raises
    ------
    DataNotFoundError
        Nothing in the cache and ``fetch=False``; says to run ``spinsa data fetch mnist``.
    DataCorruptError
        The cached file does not match its manifest; says how to re-create it.
    ValueError
        Bad split name, ``n`` or ``per_class`` 0 or more than exist, bad dtype.
    """
    return _load("mnist", split, n, per_class, seed, fetch, dtype, return_index)


def load_fashion_mnist(
    split: str = "train",
    n: int | None = None,
    per_class: int | None = None,
    seed=0,
    *,
    fetch: bool = False,
    dtype=np.float32,
    return_index: bool = False,
) -> tuple[np.ndarray, ...]:
    """Fashion-MNIST images in [0, 1] and their labels, from the cache.

    Same parameters, returns and sampling as :func:`load_mnist`. Class ``k`` is
    ``FASHION_MNIST_CLASSES[k]``. With ``fetch=True`` an empty cache is filled from
    ``/usr/share/datasets/fashion-mnist`` (Debian's ``dataset-fashion-mnist``); without it,
    the :class:`DataNotFoundError` says to install that package or use ``--from DIR``.
    """
    return _load("fashion-mnist", split, n, per_class, seed, fetch, dtype, return_index)
