"""Time series as chains of vector spins (docs/model.md, 'Series as spin chains'), against
backprop sequence models.

A window of a scalar series is N tokens; each value, min-max scaled on the training range,
is a 2-vector spin as a pixel is, k consecutive values may share a token, and the fixed
orthonormal F of :class:`spinsa.PatchEmbedding` lifts it to d. Forecasting the next value is
masked prediction of the last token.

- :mod:`~spinsa.sequences.data`: splits by time, normalisation, windows, synthetic series;
- :mod:`~spinsa.sequences.encoding`: :class:`SeriesEmbedding`, values <-> spins;
- :mod:`~spinsa.sequences.references`: persistence, the training mean, AR(L);
- :mod:`~spinsa.sequences.forecast`: the bare self-attention as a forecaster;
- :mod:`~spinsa.sequences.models`, :mod:`~spinsa.sequences.train`: RNN, transformer encoder
  and S4D in torch (imported on first use);
- ``spinsa sequences run`` is :mod:`spinsa.experiments.sequences` (an orchestrator, a floor up).
"""
