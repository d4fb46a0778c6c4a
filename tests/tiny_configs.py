"""Tiny synthetic experiment configurations shared by the reproduce tests (seconds to run)."""

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
PNG = b"\x89PNG\r\n\x1a\n"  # the first bytes of every PNG file
