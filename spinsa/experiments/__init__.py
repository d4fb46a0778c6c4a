"""Experiments end to end: fit the couplings, run the dynamics on the paper's tasks, report.

::

    from spinsa.experiments import ExperimentConfig, run_experiment, reproduce

    config = ExperimentConfig.from_toml("analysis/configs/experiment.toml")
    run_experiment(config, "run.h5")                 # fit + masked + denoise, one HDF5 file
    reproduce("out/", quick=True)                    # the paper's Fig. 1, with a report

* :mod:`~spinsa.experiments.config`: :class:`ExperimentConfig` (data, embedding, fit,
  dynamics, tasks) and :class:`ReproduceConfig` (shared sections + a list of models);
* :mod:`~spinsa.experiments.pipeline`: :func:`train`, :func:`evaluate`, :func:`run_experiment`;
* :mod:`~spinsa.experiments.reproduce`: :func:`reproduce`, resumable stage by stage;
* :mod:`~spinsa.experiments.analyze`: :func:`analyze_run`, every analysis of a run file;
* :mod:`~spinsa.experiments.compare`: :func:`compare_runs`, several run files side by side;
* :mod:`~spinsa.experiments.sequences`: :func:`run_sequences`, the sequence benchmark;
* :mod:`~spinsa.experiments.stages`: the stage engine under all of them (one rule of "done");
* reading results back: :mod:`spinsa.io.results`; the numbers of a report:
  :mod:`spinsa.analysis.summary`; the reports themselves: :mod:`spinsa.report`; the
  notebook's dynamics: :mod:`spinsa.damico`.

Importing this package imports neither torch nor matplotlib.
"""

from spinsa.analysis.summary import read_summaries
from spinsa.damico import damico_run, damico_step, standardize_features
from spinsa.experiments.analyze import analyze_run
from spinsa.experiments.compare import compare_runs
from spinsa.experiments.config import (
    DataSection,
    DynamicsSection,
    EmbeddingSection,
    ExperimentConfig,
    ModelSpec,
    ReproduceConfig,
    TasksSection,
)
from spinsa.experiments.pipeline import (
    TASKS,
    TaskEvaluation,
    evaluate,
    evaluate_task,
    load_images,
    run_experiment,
    train,
)
from spinsa.experiments.reproduce import FinishedRunError, reproduce
from spinsa.io.results import model_names, read_evaluation

__all__ = [
    "TASKS",
    "analyze_run",
    "compare_runs",
    "DataSection",
    "DynamicsSection",
    "EmbeddingSection",
    "ExperimentConfig",
    "FinishedRunError",
    "ModelSpec",
    "ReproduceConfig",
    "TaskEvaluation",
    "TasksSection",
    "damico_run",
    "damico_step",
    "evaluate",
    "evaluate_task",
    "load_images",
    "model_names",
    "read_evaluation",
    "read_summaries",
    "reproduce",
    "run_experiment",
    "standardize_features",
    "train",
]
