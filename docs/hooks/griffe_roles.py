"""Griffe extension: the Sphinx roles of spinsa's docstrings become cross-references.

spinsa's docstrings are numpydoc and name other objects the Sphinx way, ``:func:`save_fit```,
``:class:`~spinsa.fit.FitResult```, ``:meth:`.run```. mkdocstrings renders Markdown, where
those roles would show as raw text; this extension rewrites them when griffe has loaded the
package, before anything is rendered, into mkdocs-autorefs links
(``[`save_fit`][spinsa.io.hdf5.save_fit]``). The docstrings in the package stay as they are.

A target is looked up the way Sphinx does it: relative to the object whose docstring it is
and then to each enclosing class, module and package up to ``spinsa``; failing that (a
leading ``.``, a package that exports lazily) it is the unique object whose dotted name ends
with the target, under the package the target names. The link points to
the object's canonical path, which mkdocstrings registers for every place the object is
rendered. A target that names nothing in spinsa (or several things) is reported as a
warning, which fails ``mkdocs build --strict``; so does a link to an object the site does not
render, through mkdocs-autorefs. Targets in other packages (``numpy.ndarray``) are set as
code without a link.

mkdocs.yml loads it with ``extensions: [docs/hooks/griffe_roles.py:SphinxRoles]`` (a path
relative to the folder of mkdocs.yml, the repository root).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import griffe

# A logger under "mkdocs.": mkdocs counts its warnings, so --strict fails on them.
_log = logging.getLogger("mkdocs.plugins.spinsa.griffe_roles")

ROLE_RE = re.compile(
    r":(?:py:)?(?P<role>func|class|meth|data|attr|mod|exc|obj|const|type):"
    r"`(?P<body>[^`]+)`"
)
"""A Sphinx role in a docstring: ``:role:`target``` or ``:role:`title <target>```."""

ROOT = "spinsa"
"""The package whose names the roles may omit: ``:func:`save_fit``` may mean ``spinsa.save_fit``."""

EXTERNAL = ("numpy", "np", "scipy", "torch", "h5py", "dask", "xarray", "matplotlib", "pandas")
"""Top-level names of other packages: their targets are set as code, without a link."""


def _member(obj: griffe.Object | griffe.Alias, name: str):
    """The member ``name`` of ``obj`` (following ``obj`` if it is an alias), or None."""
    try:
        if obj.is_alias:
            obj = obj.final_target
        return obj.members.get(name)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def lookup(root: griffe.Module, path: str):
    """The griffe object at the dotted ``path`` under ``root`` (aliases followed), or None."""
    parts = path.split(".")
    if parts[0] != root.name:
        return None
    obj = root
    for part in parts[1:]:
        obj = _member(obj, part)
        if obj is None:
            return None
    try:
        return obj.final_target if obj.is_alias else obj
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _scopes(obj: griffe.Object) -> Iterator[str]:
    """The dotted paths a relative name is tried against: ``obj`` and its parents, innermost
    first (a function's own name is not a scope, but its class and module are)."""
    scope = obj if (obj.is_class or obj.is_module) else obj.parent
    while scope is not None:
        yield scope.path
        scope = scope.parent


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and every object defined under it (aliases, i.e. imports, skipped)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def resolve(target: str, obj: griffe.Object, root: griffe.Module, index: list[str]):
    """The canonical path of the object ``target`` names in the docstring of ``obj``.

    Parameters
    ----------
    target : str
        The role's target without ``~`` and ``()``, e.g. ``save_fit``, ``.run``,
        ``spinsa.io.read_run``.
    obj : griffe.Object
        The object whose docstring holds the role: relative names start from it.
    root : griffe.Module
        The ``spinsa`` package.
    index : list of str
        The dotted paths of every object in the package, for the suffix search of ``.name``.

    Returns
    -------
    list of str
        One canonical path when the target resolves; several when it is ambiguous (a
        ``.name`` matching more than one object); empty when it names nothing.
    """
    name = target.lstrip(".")
    candidates = [f"{scope}.{name}" for scope in _scopes(obj)]
    candidates += [name, f"{ROOT}.{name}"]
    for path in candidates:
        found = lookup(root, path)
        if found is not None:
            return [found.path]
    if target.startswith("."):
        return sorted({p for p in index if p.endswith(target)})
    # Not reachable by attribute access (a package that exports lazily, a name imported only
    # for type checking): take the one object of that name under the named package.
    head, _, last = name.rpartition(".")
    if head and head != ROOT and not head.startswith(ROOT + "."):
        head = f"{ROOT}.{head}"
    package = head if head and lookup(root, head) is not None else ROOT
    return sorted({p for p in index if p.startswith(package + ".") and p.endswith("." + last)})


def _display(body: str) -> tuple[str, str]:
    """(target, text shown) of a role's body: ``title <target>``, ``~a.b.c`` shows ``c``."""
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>", body)
    if explicit:
        target = explicit["target"].strip()
        return target.lstrip("~").removesuffix("()"), explicit["title"]
    target = body.strip().removesuffix("()")
    if target.startswith("~"):
        target = target[1:]
        return target, target.rsplit(".", 1)[-1]
    return target, target.lstrip(".")


def convert(text: str, obj: griffe.Object, root: griffe.Module, index: list[str]) -> str:
    """``text`` with every Sphinx role replaced by an autorefs link (or code, see the module
    docstring); unresolved targets are logged as warnings naming the docstring."""

    def replace(match: re.Match) -> str:
        target, shown = _display(match["body"])
        shown_md = f"`{shown}`" if "`" not in shown else shown
        if target.lstrip(".").split(".", 1)[0] in EXTERNAL:
            return shown_md
        paths = resolve(target, obj, root, index)
        if len(paths) == 1:
            return f"[{shown_md}][{paths[0]}]"
        if paths:
            why = f"it matches {len(paths)} objects ({', '.join(paths[:4])}); write the full path"
        else:
            where = obj.path if (obj.is_module or obj.is_class) else obj.parent.path
            why = (
                f"nothing of that name from {where} outwards, nor anywhere in {ROOT}; "
                "fix the name or write its full dotted path"
            )
        _log.warning(
            "%s: cannot resolve %s in the docstring of %s: %s",
            __name__.rsplit(".", 1)[-1],
            match[0],
            obj.path,
            why,
        )
        return shown_md

    return ROLE_RE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring in the ``spinsa`` package, once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.name != ROOT:
            return
        objects = list(_walk(pkg))
        index = [o.path for o in objects]
        for obj in objects:
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = convert(obj.docstring.value, obj, pkg, index)
                obj.docstring.__dict__.pop("parsed", None)  # parsed from the new text
