"""The ``spinsa`` command line: one parser per subcommand, one error boundary.

Each subcommand module declares its parsers (``add_<name>(subparsers)``, with help texts so
that ``spinsa <name> --help`` explains it) and a handler set with ``set_defaults(func=...)``
that imports what it needs lazily, so ``spinsa --help`` stays fast. This package is the top
layer: nothing in spinsa imports it. Errors a user can fix (bad input, missing files) are
printed as one line and exit with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from spinsa.cli import basics, experiments
from spinsa.cli._common import UsageError

__all__ = ["UsageError", "build_parser", "main"]


def _add_scan(sub) -> None:
    from spinsa.scan.cli import add_parser

    add_parser(sub)


# Subcommands, in the order `spinsa --help` lists them.
_SUBCOMMANDS = [
    basics.add_info,
    basics.add_demo,
    basics.add_bench,
    basics.add_data,
    experiments.add_train,
    experiments.add_evaluate,
    experiments.add_reproduce,
    experiments.add_analyze,
    experiments.add_plot,
    _add_scan,
]


def build_parser() -> argparse.ArgumentParser:
    """The ``spinsa`` parser with every subcommand."""
    from spinsa import __version__

    parser = argparse.ArgumentParser(
        prog="spinsa",
        description="Self-attention as an attractor network: vector-spin dynamics, "
        "pseudo-likelihood training without backpropagation, and its analysis.",
    )
    parser.add_argument("--version", action="version", version=f"spinsa {__version__}")
    sub = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``spinsa`` with ``argv`` (default: the process's); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"spinsa {sys.argv[1] if len(sys.argv) > 1 else ''}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished work is kept and a re-run resumes from it", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
