"""The documentation site: Sphinx roles become links, every public module has an API entry,
docstrings with sections have the ones their function needs, and the site builds clean.

The build hooks live in docs/hooks/ (loaded by mkdocs.yml): griffe_roles.py turns the roles
of the docstrings into mkdocs-autorefs links, api_reference.py writes the API page. The roles
are tested on a small package written to a temporary folder, the page on spinsa itself.
"""

import ast
import importlib.util
import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

griffe = pytest.importorskip("griffe", reason="the docs tests need the docs extra")
pytest.importorskip("mkdocs", reason="the docs tests need the docs extra")

REPO = pathlib.Path(__file__).resolve().parents[1]
# How a Sphinx role looks in HTML once Markdown has made its backticks a code span, any role
# (:func:, :math:, :py:class:): the extension converts the cross-reference ones; any other
# would be a new habit to handle. (A role quoted inside code, as docs/install.md shows the
# syntax, is not one.)
RAW_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:<code>")


def _hook(name):
    path = REPO / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def roles():
    return _hook("griffe_roles")


@pytest.fixture(scope="module")
def api():
    return _hook("api_reference")


@pytest.fixture(scope="module")
def spinsa_package(api):
    """spinsa as griffe reads it from the sources (nothing imported)."""
    return api.load_package(REPO)


# A package named like spinsa, small enough to know every answer: a module and a function of
# the same name (as spinsa.analysis.overlaps), a class with a method, a re-export.
TOY = {
    "__init__.py": '''
        """The toy namespace."""
        from .io import save_fit
        __all__ = ["save_fit"]
    ''',
    "io.py": '''
        """Files."""
        def save_fit(path):
            """Write. See :func:`read_run`, :func:`~spinsa.io.read_run` and :mod:`spinsa.model`."""
        def read_run(path):
            """Read. Written by :func:`save_fit`; the model is :class:`.Model`."""
        def _helper():
            """Private."""
    ''',
    "_convergence.py": '''
        """A private module with an entry of its own."""
        RULE = 1
    ''',
    "model.py": '''
        """The model: :meth:`Model.run` and :func:`overlaps`."""
        def overlaps(x):
            """As :func:`the fit <spinsa.save_fit>`; with :class:`numpy.ndarray`."""
        class Model:
            """A model; :meth:`.run` runs it, :attr:`missing` is nowhere."""
            def run(self):
                """Run; :meth:`run` again is this one, :func:`overlaps` the module's."""
    ''',
}


@pytest.fixture
def toy(tmp_path, roles):
    """The toy package loaded with the roles extension: its docstrings as the site shows them."""
    root = tmp_path / "spinsa"
    root.mkdir()
    for name, text in TOY.items():
        (root / name).write_text(textwrap.dedent(text))
    extensions = griffe.load_extensions(roles.SphinxRoles)
    return griffe.load(
        "spinsa", search_paths=[str(tmp_path)], extensions=extensions, try_relative_path=False
    )


def test_roles_resolve_relative_to_the_docstring_then_the_namespace(toy, caplog):
    docs = {
        path: toy[path].docstring.value
        for path in ("io.save_fit", "io.read_run", "model", "model.overlaps", "model.Model.run")
    }
    assert docs["io.save_fit"] == (
        "Write. See [`read_run`][spinsa.io.read_run], [`read_run`][spinsa.io.read_run] "
        "and [`spinsa.model`][spinsa.model]."
    )
    # a short name from the same module; a leading dot searches every module
    assert docs["io.read_run"] == (
        "Read. Written by [`save_fit`][spinsa.io.save_fit]; the model is "
        "[`Model`][spinsa.model.Model]."
    )
    assert docs["model"] == (
        "The model: [`Model.run`][spinsa.model.Model.run] and [`overlaps`][spinsa.model.overlaps]."
    )
    # an explicit title; a re-export links to where the object is defined; other packages
    # are code without a link
    assert docs["model.overlaps"] == ("As [`the fit`][spinsa.io.save_fit]; with `numpy.ndarray`.")
    assert docs["model.Model.run"] == (
        "Run; [`run`][spinsa.model.Model.run] again is this one, "
        "[`overlaps`][spinsa.model.overlaps] the module's."
    )


def test_an_unresolvable_role_is_a_warning_that_fails_a_strict_build(roles, toy, caplog):
    with caplog.at_level(logging.WARNING):
        index = [o.path for o in toy.modules["model"].members.values()]
        text = roles.convert(":attr:`missing` and :func:`.nowhere`", toy["model.Model"], toy, index)
    assert text == "`missing` and `nowhere`"  # never left as a raw role
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    # mkdocs --strict counts warnings of the loggers under "mkdocs."
    assert all(r.name.startswith("mkdocs.") for r in warnings)
    assert "spinsa.model.Model" in warnings[0].getMessage()
    assert ":attr:`missing`" in warnings[0].getMessage()


def test_an_ambiguous_dotted_name_is_reported(roles, toy, caplog):
    index = ["spinsa.a.run", "spinsa.c.walk", "spinsa.d.walk"]
    with caplog.at_level(logging.WARNING):
        text = roles.convert(":func:`.walk`", toy["io"], toy, index)
    assert text == "`walk`"
    assert "matches 2 objects" in caplog.records[-1].getMessage()


class _FakeAutorefs:
    """The one call of mkdocs-autorefs the hook makes: the URL of an identifier, or KeyError."""

    def __init__(self, known):
        self.known = set(known)

    def get_item_url(self, identifier, from_url=None):
        if identifier not in self.known:
            raise KeyError(identifier)
        return f"api/#{identifier}", None


def test_links_without_an_entry_land_on_the_enclosing_one(api, toy):
    class Page:
        content = (
            '<autoref identifier="spinsa.model.Model">'  # has an entry: kept
            '<autoref identifier="spinsa.model.Model.run">'  # no entry: to its class
            '<autoref identifier="spinsa.io._helper">'  # private: unlinked
            '<autoref identifier="spinsa._convergence.RULE">'  # in a documented private module
            '<autoref identifier="spinsa.io.nothing">'  # names nothing: kept, autorefs warns
            '<autoref identifier="spinsa.nomodule">'  # the same
            '<autoref optional identifier="spinsa.x.y">'  # mkdocstrings' own: kept
        )

    class File:
        page = Page()

    class Config:
        known = ["spinsa", "spinsa.io", "spinsa.model", "spinsa.model.Model", "spinsa._convergence"]
        plugins = {"autorefs": _FakeAutorefs(known)}

    api._BUILD["package"] = toy
    try:
        api.on_env(None, config=Config(), files=[File()])
    finally:
        api._BUILD.clear()
    assert File.page.content == (
        '<autoref identifier="spinsa.model.Model">'
        '<autoref identifier="spinsa.model.Model">'
        '<autoref identifier="spinsa.io._helper" optional>'
        '<autoref identifier="spinsa._convergence">'
        '<autoref identifier="spinsa.io.nothing">'
        '<autoref identifier="spinsa.nomodule">'
        '<autoref optional identifier="spinsa.x.y">'
    )


def _public_modules_on_disk(api):
    """Every module file of spinsa, as a dotted name, that the API page must have."""
    found = []
    for path in sorted((REPO / "spinsa").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if api._is_documented(name):
            found.append(name)
    return found


def test_every_public_module_has_an_api_entry(api, spinsa_package):
    page = api.reference_markdown(spinsa_package)
    entries = re.findall(r"^::: (\S+)$", page, flags=re.MULTILINE)
    assert len(entries) == len(set(entries)), "a module is documented twice"
    on_disk = _public_modules_on_disk(api)
    assert "spinsa.analysis.overlaps" in on_disk
    missing = sorted(set(on_disk) - set(entries))
    assert not missing, f"modules without an entry on the API page: {missing}"
    # and the page's entries are modules that exist (plus the documented private ones)
    assert set(entries) <= set(on_disk) | set(api.PRIVATE_DOCUMENTED)


def test_every_exported_name_is_documented_or_linked(api, spinsa_package):
    page = api.reference_markdown(spinsa_package)
    rendered = set()
    for members in re.findall(r"members: \[(.*)\]", page):
        rendered.update(m.strip() for m in members.split(","))
    linked = set(re.findall(r"\[`(\w+)`\]\[", page))
    for module in api.documented_modules(spinsa_package):
        mod = spinsa_package if module == "spinsa" else spinsa_package[module[len("spinsa.") :]]
        for name in api._exported(mod):
            member = mod.members.get(name)
            if member is None or member.is_module:
                continue  # exported lazily: documented in the module that defines it
            assert name in rendered | linked, f"{module}.{name} is exported but not on the API page"


# Public functions whose docstring has numpydoc sections but lacks one it needs. New ones fail
# the test, and so does a line left here once its docstring is complete.
INCOMPLETE: dict[str, str] = {}


# Public objects without a docstring. Document one, then drop its line.
UNDOCUMENTED: set[str] = set()


def test_public_functions_and_classes_have_a_docstring(api, spinsa_package):
    """mkdocstrings leaves an object without a docstring off the page, and ``help()`` shows
    nothing. A string built by an expression (a literal plus a shared block) in the place of
    the docstring is no docstring at all, even at run time."""
    objects = {
        **_public_objects(api, spinsa_package),
        **_public_objects(api, spinsa_package, "class"),
    }
    assert "spinsa.sampling.gibbs" in objects
    missing = sorted(p for p, o in objects.items() if o.docstring is None and p not in UNDOCUMENTED)
    assert not missing, f"public objects without a docstring: {missing}"
    stale = sorted(p for p in UNDOCUMENTED if p not in objects or objects[p].docstring is not None)
    assert not stale, f"documented (or gone) now, drop them from UNDOCUMENTED: {stale}"


def _returns_value(func) -> bool:
    """Whether ``func`` returns (or yields) something: by its annotation, else by its body."""
    if func.returns is not None:
        return str(func.returns) not in ("None", "NoReturn")
    try:
        body = ast.parse(textwrap.dedent(func.source)).body[0].body
    except (SyntaxError, IndexError, AttributeError, OSError):
        return False
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # a nested function's return is not this one's
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _public_objects(api, package, kind="function"):
    """Each public function (or class) once: those named by a documented module's ``__all__``."""
    seen = {}
    for module in api.documented_modules(package):
        mod = package if module == "spinsa" else package[module[len("spinsa.") :]]
        for name in api._exported(mod):
            member = mod.members.get(name)
            try:
                func = member.final_target if member is not None and member.is_alias else member
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            if func is not None and func.kind.value == kind:
                seen.setdefault(func.path, func)
    return seen


def test_functions_with_sections_have_parameters_and_returns(api, spinsa_package):
    """A docstring of one or two sentences may carry its shapes in words; once it has numpydoc
    sections, it has Parameters when the function takes arguments and Returns (or Yields) when
    it returns a value, as the reader of the API page expects."""
    kinds = griffe.DocstringSectionKind
    functions = _public_objects(api, spinsa_package)
    assert "spinsa.analysis.overlaps.trajectory_overlaps" in functions
    found = {}
    for path, func in functions.items():
        if func.docstring is None:
            continue
        sections = {s.kind for s in func.docstring.parse("numpy")}
        if sections <= {kinds.text, kinds.admonition, kinds.examples}:
            continue
        lacking = []
        takes_arguments = any(p.name not in ("self", "cls") for p in func.parameters)
        if takes_arguments and kinds.parameters not in sections:
            lacking.append("Parameters")
        if _returns_value(func) and not sections & {kinds.returns, kinds.yields}:
            lacking.append("Returns")
        if lacking:
            found[path] = " ".join(lacking)
    new = {p: s for p, s in found.items() if INCOMPLETE.get(p) != s}
    assert not new, f"docstrings that lack a numpydoc section (add it): {new}"
    stale = sorted(p for p in INCOMPLETE if p not in found)
    assert not stale, f"complete (or gone) now, drop them from INCOMPLETE: {stale}"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("def f(x) -> int:\n    return x\n", True),
        ("def f(x) -> None:\n    print(x)\n", False),
        ("def f(x):\n    if x:\n        return x\n    return None\n", True),
        ("def f(x):\n    for i in x:\n        yield i\n", True),
        ("def f(x):\n    def g():\n        return 1\n    g()\n    return\n", False),
    ],
)
def test_returns_value_reads_the_body(code, expected):
    with griffe.temporary_visited_module(code) as module:
        assert _returns_value(module["f"]) is expected


@pytest.mark.slow  # builds the whole site: 20-40 s
def test_the_site_builds_strict_with_links_instead_of_roles(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    raw = {}
    for page in site.rglob("*.html"):
        hits = RAW_ROLE.findall(page.read_text(encoding="utf-8"))
        if hits:
            raw[str(page.relative_to(site))] = len(hits)
    assert not raw, f"raw Sphinx roles in the built site: {raw}"
    api_page = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="spinsa.analysis.overlaps"' in api_page
    # trajectory_overlaps' ":func:`nearest_patterns`" became a link to that function's entry
    start = re.search(r'id="spinsa\.[\w.]*trajectory_overlaps"', api_page).end()
    entry = api_page[start : start + re.search(r"<h[1-6] id=", api_page[start:]).start()]
    assert "Returns" in entry
    link = r'<a class="autorefs autorefs-internal"[^>]*#spinsa\.[\w.]*nearest_patterns"'
    assert re.search(link, entry)
