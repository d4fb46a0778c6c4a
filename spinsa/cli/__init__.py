"""The ``spinsa`` command line: one parser per subcommand, one error boundary.

Each subcommand module declares its parsers (``add_<name>(subparsers)``, with help texts so
that ``spinsa <name> --help`` explains it) and a handler set with ``set_defaults(func=...)``
that imports what it needs lazily, so ``spinsa --help`` stays fast. This package is the top
layer: nothing in spinsa imports it.

Every error a user can meet becomes one or two lines on standard error — what went wrong,
then what to do — and an exit status (:data:`EXIT_CODES`, explained in docs/cli.md);
warnings are one line each, too. An exception outside these classes is a bug: it keeps its
traceback and exit status 1.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
import warnings

from spinsa._checks import MissingDependencyError
from spinsa.cli import basics, bench, experiments, scan, sequences
from spinsa.cli._common import UsageError

__all__ = ["EXIT_CODES", "UsageError", "build_parser", "main"]

#: Exit status of each kind of error.
EXIT_CODES = {"usage": 2, "data": 3, "file": 4, "resources": 5, "interrupted": 130}

# what to do about an operating-system error, by errno
_OS_HINTS = {
    errno.EACCES: "check its permissions, or choose a path you can write to",
    errno.EPERM: "check its permissions, or choose a path you can write to",
    errno.EROFS: "the file system is read-only: choose another path",
    errno.EISDIR: "a file was expected there, not a directory: give a file name",
    errno.ENOTDIR: "a directory was expected there: check the path",
    errno.ENOENT: "check the path",
    errno.ENOSPC: "the disk is full: free some space or write elsewhere",
    errno.EEXIST: "choose another name, or pass --overwrite",
}


# Subcommands, in the order `spinsa --help` lists them.
_SUBCOMMANDS = [
    basics.add_info,
    basics.add_demo,
    bench.add_bench,
    basics.add_data,
    experiments.add_train,
    experiments.add_evaluate,
    experiments.add_reproduce,
    experiments.add_analyze,
    experiments.add_compare,
    experiments.add_plot,
    sequences.add_sequences,
    scan.add_scan,
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
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an error (or set SPINSA_DEBUG=1)",
    )
    sub = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


def explain(exc: BaseException) -> tuple[str, str, str]:
    """(kind of :data:`EXIT_CODES`, what went wrong, what to do) for an error, or kind ""
    for an exception that is a bug."""
    from spinsa.datasets import DataError
    from spinsa.io import SpinsaFileError

    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "interrupted", "finished work is kept; run it again to resume"
    if isinstance(exc, MemoryError):  # the first line of InsufficientMemoryError's account
        text = (str(exc) or "out of memory").splitlines()[0]
        return "resources", text, "`spinsa train ... --estimate` shows where the memory goes"
    if isinstance(exc, DataError):
        return "data", str(exc), ""
    if isinstance(exc, SpinsaFileError):
        return "file", str(exc), ""
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else ""
        if exc.errno is None:  # e.g. h5py: "Unable to open file (file signature not found)"
            text = str(exc)
            if "signature" in text:
                return "file", f"{name or 'the file'} is not an HDF5 file ({text})", ""
            return "file", text, ""
        what = f"{exc.strerror or exc}: {name}" if name else str(exc)
        return "file", what, _OS_HINTS.get(exc.errno, "")
    if isinstance(exc, (UsageError, ValueError, MissingDependencyError)):  # the user's to fix
        return "usage", str(exc), ""
    return "", "", ""


def command_options(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str, set[str]]:
    """The subcommand that ``argv`` names ("sequences run") and the options it takes."""
    words: list[str] = []
    for token in argv:
        if token.startswith("-"):
            continue
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or token not in subs[0].choices:
            break
        parser = subs[0].choices[token]
        words.append(token)
    return " ".join(words), set(parser._option_string_actions)


# What to do instead when a hint names a flag the command does not have.
_FALLBACK_HINTS = {
    "file": "choose another name",
    "resources": "give this command smaller sizes (fewer samples, a smaller dimension or "
    "resolution)",
}


def usable_hint(kind: str, todo: str, command: str, options: set[str]) -> str:
    """``todo``, or a fallback when it names a flag that ``command`` lacks or another
    command's ``spinsa ...`` line (advice must lead somewhere)."""
    flags = re.findall(r"(?<![\w-])--[a-z][a-z-]*", todo)
    other = re.search(r"spinsa ([a-z]+)", todo)
    if any(f not in options for f in flags) or other and not command.startswith(other[1]):
        return _FALLBACK_HINTS.get(kind, "")
    return todo


def main(argv: list[str] | None = None) -> int:
    """Run ``spinsa`` with ``argv`` (default: the process's); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    debug = args.debug or os.environ.get("SPINSA_DEBUG", "") not in ("", "0")
    command = next((a for a in (argv if argv is not None else sys.argv[1:]) if
                    not a.startswith("-")), "")  # fmt: skip

    def say(label: str, text: object) -> None:
        print(f"spinsa {command}: {label}: {text}".replace(" : ", ": "), file=sys.stderr)

    def warning(message, *_) -> None:  # one line: not the source line, nor line breaks
        say("warning", " ".join(str(message).split()))

    with warnings.catch_warnings():
        if not debug:
            warnings.showwarning = warning
        try:
            return int(args.func(args) or 0)
        except BrokenPipeError:  # `spinsa scan plan ... | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except (Exception, KeyboardInterrupt) as exc:
            kind, what, todo = explain(exc)
            if debug or not kind:
                raise
            say("error", what)
            argv_ = argv if argv is not None else sys.argv[1:]
            todo = usable_hint(kind, todo, *command_options(parser, argv_))
            if todo:
                print(f"  {todo}", file=sys.stderr)
            return EXIT_CODES[kind]


if __name__ == "__main__":
    sys.exit(main())
