"""mkdocs hook: fill the command-line page with the help of every ``spinsa`` subcommand.

The page ``cli.md`` holds the marker ``<!-- cli-help -->``; at build time it is replaced by
the ``--help`` text of ``spinsa`` and of each subcommand (nested ones too), taken from
``spinsa.cli.build_parser()``, so the page always matches the installed command.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- cli-help -->"
WIDTH = "88"


def _walk(parser: argparse.ArgumentParser, depth: int = 0):
    """Yield (depth, parser) for a parser and all its subcommands, depth first."""
    yield depth, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                yield from _walk(sub, depth + 1)


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    from spinsa.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps to the terminal width: make it fixed
    try:
        blocks = []
        for depth, parser in _walk(build_parser()):
            if depth == 0:
                blocks.append(f"```text\n{parser.format_help().rstrip()}\n```\n")
                continue
            heading = "#" * min(depth + 1, 4)
            help_text = parser.format_help().rstrip()
            blocks.append(f"{heading} `{parser.prog}`\n\n```text\n{help_text}\n```\n")
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return markdown.replace(MARKER, "\n".join(blocks))
