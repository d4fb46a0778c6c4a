"""The published notebook's own printed numbers, and the same measurements on spinsa's preset.

The notebook (``bare_self_attention.ipynb`` of Francill99/self_attention_attractor_network)
prints after every epoch the mean minibatch training loss and a validation score: the masked
pixels' 1 - MSE in its pixel space after 5 steps of its dynamics on 256 test images, 30 % of
their tokens masked. :func:`notebook_check` measures both on a fit of the ``damico2024``
preset (first 256 test images), with the simple references on the same images.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spinsa.experiments.pipeline import load_images, references, state_at
from spinsa.tasks import pixel_mask, reconstruction_errors

__all__ = [
    "TRAIN_LOSS",
    "VALIDATION",
    "LOSS_TOLERANCE",
    "VALIDATION_TARGET",
    "VALIDATION_TOLERANCE",
    "VALIDATION_STEPS",
    "VALIDATION_IMAGES",
    "NOTEBOOK_KIND",
    "epoch_train_loss",
    "notebook_check",
]

#: The notebook's printed training loss (mean of the epoch's minibatch losses), by epoch.
TRAIN_LOSS = {2: -1.078443, 3: -1.085399, 4: -1.094539, 5: -1.133390, 6: -1.144421,
              7: -1.159614, 8: -1.177884, 9: -1.182386}  # fmt: skip
#: Its printed validation score (masked pixels, 1 - MSE after 5 steps), by epoch; epoch 4
#: printed 0.000000 because no test batch was drawn that epoch, so it is left out.
VALIDATION = {2: 0.698962, 3: 0.727372, 5: 0.750227, 6: 0.761268, 7: 0.770638, 8: 0.780401,
              9: 0.779060}  # fmt: skip
LOSS_TOLERANCE = 0.05
VALIDATION_TARGET, VALIDATION_TOLERANCE = 0.78, 0.02
VALIDATION_STEPS = 5
VALIDATION_IMAGES = 256
NOTEBOOK_KIND = "reproduce-notebook"


def epoch_train_loss(step_loss, n_epochs: int) -> np.ndarray:
    """The mean of each epoch's minibatch losses (what a minibatch trainer prints).

    Parameters
    ----------
    step_loss : array_like, shape (n_steps,)
        Losses of every step, ``n_steps`` a multiple of ``n_epochs``.
    n_epochs : int

    Returns
    -------
    ndarray, shape (n_epochs,)
    """
    step_loss = np.asarray(step_loss, dtype=np.float64)
    if n_epochs < 1 or step_loss.size % n_epochs:
        raise ValueError(f"{step_loss.size} steps do not split into {n_epochs} equal epochs")
    return step_loss.reshape(n_epochs, -1).mean(axis=1)


def notebook_check(config, J: np.ndarray, images, step_loss, n_epochs: int, *, fetch=True):
    """The notebook's two printed measurements, on a fit of the ``damico2024`` preset.

    Parameters
    ----------
    config : ExperimentConfig
    J : ndarray, shape (N, N, d, d)
    images : spinsa.experiments.pipeline.Images
        The run's images (the training images give the references).
    step_loss : array_like, shape (n_steps,)
        The fit's per-step losses, over ``n_epochs`` epochs.
    n_epochs : int
    fetch : bool

    Returns
    -------
    arrays : dict
        ``train_loss`` (n_epochs,): the epoch means of the minibatch losses; ``masked_score``
        (256,): the first 256 test images' masked-pixel 1 - MSE after 5 steps;
        ``references/<name>`` (256,): the same score of the references.
    attrs : dict
        The published values and tolerances, the number of steps and images.
    """
    whole_split = VALIDATION_IMAGES if config.data.dataset == "synthetic" else 10_000
    test = load_images(
        config.with_overrides({"data.n_test": whole_split}), fetch=fetch, train=False
    )
    n = min(VALIDATION_IMAGES, test.test.shape[0])
    first = np.argsort(test.test_index)[:n]  # the first 256 of the split, in file order
    test_images, test_index = test.test[first], test.test_index[first]
    emb = config.make_embedding()
    x0, mask = config.tasks.inputs("masked", emb, test_images, test_index)
    x = state_at(config, J, x0, mask, VALIDATION_STEPS)
    clean = emb.pixel_space(test_images)
    pm = pixel_mask(mask, emb)
    score = 1.0 - reconstruction_errors(emb.decode_pixels(x), clean, pm).masked
    inputs, train = emb.decode_pixels(x0), emb.pixel_space(images.train)
    refs = references(config, images, "masked", clean, inputs, train, pm)
    arrays: dict[str, Any] = {
        "train_loss": epoch_train_loss(step_loss, n_epochs),
        "masked_score": score,
        "references": {k: 1.0 - r.errors.masked for k, r in refs.items()},
    }
    attrs = {
        "published_train_loss": {str(k): v for k, v in TRAIN_LOSS.items()},
        "published_validation": {str(k): v for k, v in VALIDATION.items()},
        "loss_tolerance": LOSS_TOLERANCE,
        "validation_target": VALIDATION_TARGET,
        "validation_tolerance": VALIDATION_TOLERANCE,
        "steps": VALIDATION_STEPS,
        "n_images": int(n),
        "n_epochs": int(n_epochs),
        "reference_labels": {k: r.label for k, r in refs.items()},
    }
    return arrays, attrs
