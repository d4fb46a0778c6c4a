"""The one tiny synthetic experiment of the tests (seconds to run).

``SHARED`` holds its sections as TOML (reproduce configs add ``[models.<name>]`` tables to
it); ``TINY`` is the same as an :class:`ExperimentConfig`. A test that needs another size
derives it explicitly, ``TINY.with_overrides({...})``, so that there is one definition.
"""

from spinsa.experiments import ExperimentConfig

SHARED = """
[data]
dataset = "synthetic"
n_train = 120
n_test = 20
image_size = 12
[embedding]
patch = 2
[fit]
backend = "lbfgs"
lam = 5.0
max_iter = 3
[dynamics]
steps = 4
[tasks]
n_examples = 2
"""
ONE_MODEL = SHARED + "[models.design]\n"
TINY_TOML = 'name = "tiny"\n' + SHARED
TINY = ExperimentConfig.from_toml(TINY_TOML)
PNG = b"\x89PNG\r\n\x1a\n"  # the first bytes of every PNG file
