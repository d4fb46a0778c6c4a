"""What every subcommand shares: the user-error type and the option helpers."""

from __future__ import annotations

__all__ = ["UsageError", "add_progress_flag"]


class UsageError(Exception):
    """A problem with the user's input: printed as one line, without a traceback."""


def add_progress_flag(parser) -> None:
    """``--no-progress``: no progress bars (they are quiet in logs and pipes anyway)."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
