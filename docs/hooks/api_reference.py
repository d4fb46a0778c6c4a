"""mkdocs hook: generate the API reference from the package, and land every link on an entry.

1. ``api.md`` holds the marker ``<!-- api-reference -->``; at build time it is replaced by one
   section per module of ``spinsa``, found by walking the package with griffe, so a new module
   cannot be left out. Each object is documented once, in the first module (the ``spinsa``
   namespace first, then each package before its modules) whose ``__all__`` names it; a later
   module that exports it too links to that entry. Modules whose dotted name has a part with a
   leading underscore are private and left out, except those in ``PRIVATE_DOCUMENTED``.
2. A cross-reference to a public object the site has no entry of its own for (a dataclass
   field, a module constant outside ``__all__``) is pointed at the entry of the nearest
   enclosing object (its class, its module) before mkdocs-autorefs resolves it; one to a
   private object (a name with a leading underscore, the numba kernels) is set as code without
   a link. Both are listed at INFO level. A reference to nothing in spinsa, or to a public
   top-level module without an entry, stays as it is: mkdocs-autorefs then warns, and
   ``mkdocs build --strict`` fails.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import griffe
from mkdocs.plugins import event_priority

_log = logging.getLogger("mkdocs.plugins.spinsa.api_reference")

MARKER = "<!-- api-reference -->"
MARKER_DONE = "<!-- api-reference generated -->"
ROOT = "spinsa"

PRIVATE_DOCUMENTED = ("spinsa._convergence",)
"""Private modules that still get an entry: what they define is read in the files users get."""

SKIPPED = ("spinsa.kernels", "spinsa.cli.__main__")
"""Modules left out on purpose: the numba kernels are private by design (docs/architecture.md),
and ``python -m spinsa.cli`` is documented on the command-line page."""

TITLES = {
    "spinsa.embedding": "Embedding",
    "spinsa.couplings": "Couplings",
    "spinsa.tasks": "Tasks",
    "spinsa.references": "References",
    "spinsa.vmf": "The von Mises–Fisher distribution",
    "spinsa.sampling": "Monte Carlo at a temperature",
    "spinsa.damico": "The notebook's dynamics",
    "spinsa.model": "The model",
    "spinsa.fit": "Fitting",
    "spinsa.fit.convergence": "Convergence of a fit",
    "spinsa.analysis": "Analysis",
    "spinsa.analysis.compare": "Several coupling tensors side by side",
    "spinsa.analysis.planted": "Planted inverse problems",
    "spinsa.analysis.summary": "Summaries of an evaluation",
    "spinsa.datasets": "Data sets",
    "spinsa.io": "Files",
    "spinsa.io.results": "Results read back",
    "spinsa._convergence": "Convergence",
    "spinsa.baselines": "Baselines",
    "spinsa.sequences": "Sequences",
    "spinsa.scan": "Phase scans",
    "spinsa.experiments": "Experiments",
    "spinsa.experiments.compare": "Comparing run files",
    "spinsa.experiments.stages": "Stages of every pipeline",
    "spinsa.experiments.sequences": "The sequence benchmark",
    "spinsa.report": "Reports",
    "spinsa.plotting": "Figures",
    "spinsa.bench": "Benchmarks",
    "spinsa.cli": "The command line",
}
"""Section titles; a module missing here is titled by its dotted name alone. The order of this
table is the order of the page; modules missing from it come after, alphabetically."""


def _is_documented(path: str) -> bool:
    if path in PRIVATE_DOCUMENTED:
        return True
    if any(path == s or path.startswith(s + ".") for s in SKIPPED):
        return False
    return not any(part.startswith("_") for part in path.split("."))


def _submodules(mod: griffe.Module) -> list[griffe.Module]:
    """The modules defined inside ``mod`` (not the ones it imports), in page order."""
    subs = [m for m in mod.members.values() if not m.is_alias and m.is_module]
    order = {path: i for i, path in enumerate(TITLES)}
    return sorted(subs, key=lambda m: (order.get(m.path, len(order)), m.path))


def _canonical(obj) -> str | None:
    try:
        return obj.final_target.path if obj.is_alias else obj.path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None  # re-exported from another package: not documented here


def _exported(mod: griffe.Module) -> list[str]:
    """The names ``mod`` makes public: its ``__all__``, else its public members defined in it."""
    if mod.exports is not None:
        return [name if isinstance(name, str) else name.name for name in mod.exports]
    return [
        n
        for n, m in mod.members.items()
        if not n.startswith("_") and not m.is_alias and not m.is_module
    ]


def _section(mod: griffe.Module, level: int, documented: dict[str, str]) -> list[str]:
    """The Markdown of one module's entry (a heading of ``level``), then its submodules'."""
    title = TITLES.get(mod.path)
    heading = f"{title}: `{mod.path}`" if title else f"`{mod.path}`"
    if mod.path == ROOT:
        heading = f"The `{ROOT}` namespace"
    own, elsewhere = [], []
    for name in _exported(mod):
        member = mod.members.get(name)
        path = _canonical(member) if member is not None else None
        if path is None or member.is_module:
            continue  # exported lazily (``__getattr__``), or a submodule: it has its own entry
        if path in documented:
            elsewhere.append((name, path))
        else:
            documented[path] = mod.path
            own.append(name)
    options = [
        "show_root_heading: false",
        "show_root_toc_entry: false",
        f"heading_level: {min(level + 1, 6)}",
        f"members: [{', '.join(own)}]" if own else "members: false",
    ]
    lines = [f"{'#' * level} {heading} {{ #{mod.path} }}", "", f"::: {mod.path}", "    options:"]
    lines += [*(f"      {o}" for o in options), ""]
    if elsewhere:
        links = ", ".join(f"[`{name}`][{path}]" for name, path in elsewhere)
        lines += [f"Also exported here, and documented above: {links}.", ""]
    # The namespace's modules are sections of their own, at its level.
    sub_level = level if mod.path == ROOT else min(level + 1, 5)
    for sub in _submodules(mod):
        if _is_documented(sub.path):
            lines += _section(sub, sub_level, documented)
    return lines


def reference_markdown(package: griffe.Module) -> str:
    """The generated part of ``api.md``: one entry per documented module of ``package``."""
    return "\n".join(_section(package, 2, {}))


def documented_modules(package: griffe.Module) -> list[str]:
    """The dotted names of the modules that get an entry (for the coverage test)."""
    found = [package.path]
    stack = [package]
    while stack:
        mod = stack.pop()
        for sub in _submodules(mod):
            if _is_documented(sub.path):
                found.append(sub.path)
                stack.append(sub)
    return found


def load_package(root_dir: str | Path = ".") -> griffe.Module:
    """``spinsa`` as griffe sees it, read from the sources under ``root_dir`` (nothing imported)."""
    return griffe.load(ROOT, search_paths=[str(root_dir)], resolve_aliases=True)


_BUILD: dict[str, griffe.Module] = {}
"""The package as read for this build (``mkdocs serve`` rebuilds: read again each time)."""


def _package(config) -> griffe.Module:
    if "package" not in _BUILD:
        _BUILD["package"] = load_package(Path(config["config_file_path"]).parent)
    return _BUILD["package"]


def _exists(package: griffe.Module, identifier: str) -> bool:
    """Whether the dotted ``identifier`` names an object of ``package`` (imports followed)."""
    if identifier == package.path:
        return True
    try:
        package[identifier.removeprefix(package.path + ".")]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return True


def on_pre_build(config):
    _BUILD.clear()


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    generated = reference_markdown(_package(config))
    return markdown.replace(MARKER, f"{MARKER_DONE}\n\n{generated}")


_HEADING_ID = re.compile(r'<h[1-6] id="(spinsa(?:\.\w+)*)"')


def on_page_content(html, page, config, files):
    """Register the module headings of the API page as link targets of their dotted names.

    (mkdocstrings registers the objects it renders, but not a module rendered without its
    own heading; headings of other pages are not targets, so ``spinsa`` is only this one.)
    """
    autorefs = config.plugins.get("autorefs")
    if autorefs is None or MARKER_DONE not in html:
        return html
    for identifier in _HEADING_ID.findall(html):
        try:
            autorefs.get_item_url(identifier)
        except KeyError:
            autorefs.register_anchor(page, identifier, primary=True)
    return html.replace(MARKER_DONE, "")


_AUTOREF = re.compile(r"<autoref\b[^>]*>")
_IDENTIFIER = re.compile(r'\bidentifier="(spinsa(?:\.\w+)*)"')


@event_priority(0)  # before mkdocs-autorefs resolves the links (its on_env runs at -50)
def on_env(env, config, files):
    autorefs = config.plugins.get("autorefs")
    if autorefs is None:
        return env
    package = _package(config)

    def has_entry(identifier: str) -> bool:
        try:
            autorefs.get_item_url(identifier)
        except KeyError:
            return False
        return True

    moved: dict[str, str] = {}
    unlinked: list[str] = []

    def private(identifier: str) -> bool:
        if identifier.startswith(tuple(m + "." for m in PRIVATE_DOCUMENTED)):
            return False
        return any(part.startswith("_") for part in identifier.split("."))

    def enclosing_entry(identifier: str) -> str | None:
        """The nearest enclosing object with an entry, below the ``spinsa`` namespace."""
        parts = identifier.split(".")
        for n in range(len(parts) - 1, 1, -1):
            if has_entry(".".join(parts[:n])):
                return ".".join(parts[:n])
        return None

    def nearest(match: re.Match) -> str:
        tag = match[0]
        found = _IDENTIFIER.search(tag)
        if found is None or re.search(r"\boptional\b", tag) or has_entry(found[1]):
            return tag
        identifier = found[1]
        if not _exists(package, identifier):
            return tag  # a link to nothing (a typo in a page): autorefs warns
        parent = None if private(identifier) else enclosing_entry(identifier)
        if parent is not None:
            moved[identifier] = parent
            return tag[: found.start(1)] + parent + tag[found.end(1) :]
        if _is_documented(identifier) and identifier.count(".") == 1:
            return tag  # a public module of spinsa without an entry: autorefs warns
        # Private, or inside the kernels: the name is set as code, unlinked.
        unlinked.append(identifier)
        return tag[:-1] + " optional>"

    for file in files:
        if file.page is not None and file.page.content:
            file.page.content = _AUTOREF.sub(nearest, file.page.content)
    if moved:
        _log.info(
            "%d cross-references point to the enclosing entry (no entry of their own): %s",
            len(moved),
            ", ".join(f"{a} -> {b}" for a, b in sorted(moved.items())),
        )
    if unlinked:
        _log.info(
            "%d cross-references name private objects and are set without a link: %s",
            len(set(unlinked)),
            ", ".join(sorted(set(unlinked))),
        )
    return env
