"""The progress helper off a terminal: one line per stage, whose count agrees with its noun."""

import pytest

from spinsa._progress import count, progress


@pytest.mark.parametrize(
    ("n", "noun", "text"),
    [
        (1, "task", "1 task"),
        (12, "task", "12 tasks"),  # "12 task" before
        (0, "figure", "0 figures"),
        (2.5, "step", "2.5 steps"),
        (3, "analysis", "3 analyses"),
        (2, "worker process", "2 worker processes"),
        (1, "worker process", "1 worker process"),
        (40, "it", "40 it"),  # tqdm's iterations
    ],
)
def test_count_agrees_with_its_noun(n, noun, text):
    assert count(n, noun) == text


def test_the_line_off_a_terminal_says_tasks(capsys):
    with progress(12, "recall", "task") as bar:  # stderr is captured: not a terminal
        for _ in range(12):
            bar.update()
    with progress(1, "recall", "task") as bar:
        bar.update()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("recall: 12 tasks in ")
    assert lines[1].startswith("recall: 1 task in ")
