import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh seeded generator per test: tests never share random state."""
    return np.random.default_rng(20240601)


@pytest.fixture(scope="session")
def run_file(tmp_path_factory):
    """The run file of the one tiny experiment (``tiny_configs.TINY``: the fit and both
    evaluations), written once for the session: tests read it and never change it."""
    from tiny_configs import TINY

    from spinsa.experiments import run_experiment

    return run_experiment(TINY, tmp_path_factory.mktemp("run") / "run.h5")


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test: tiny models run fastest so, and they do not fight
    other processes for cores. Modules that want it: ``pytestmark =
    pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` when no CUDA device is present."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
