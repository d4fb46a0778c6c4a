"""What every subcommand shares: the user-error type and the option helpers."""

from __future__ import annotations

__all__ = ["UsageError", "add_progress_flag", "parse_set"]


class UsageError(Exception):
    """A problem with the user's input: printed as one line, without a traceback."""


def add_progress_flag(parser) -> None:
    """``--no-progress``: no progress bars (they are quiet in logs and pipes anyway)."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def parse_set(items: list[str] | None) -> dict:
    """``["fit.lam=5", "name=x"]`` -> ``{"fit.lam": 5, "name": "x"}``; values are TOML
    literals (``5``, ``5.0``, ``true``, ``"text"``, ``[0, 1]``), bare words are strings."""
    from spinsa._config import read_toml

    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set expects KEY=VALUE (e.g. fit.lam=5), got {item!r}")
        try:
            value = read_toml(f"v = {text.strip()}\n")["v"]
        except ValueError:
            value = text.strip()
        out[key] = value
    return out
