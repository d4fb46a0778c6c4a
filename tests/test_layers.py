"""The layers of spinsa point one way: every import, also inside a function, goes down.

The order (docs/architecture.md draws it); a module may import from its own layer and those
below it, never from a layer above, and no chain of imports comes back to where it started.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "spinsa"

LAYERS = [
    # base: no physics, no files of spinsa
    ["spinsa._version", "spinsa._checks", "spinsa._config", "spinsa._files",
     "spinsa._progress", "spinsa._torch", "spinsa._convergence", "spinsa._draw",
     "spinsa.kernels"],
    # the model: spins, couplings, dynamics, tasks, the simple references
    ["spinsa.model", "spinsa.couplings", "spinsa.embedding", "spinsa.tasks", "spinsa.damico",
     "spinsa._torch_dynamics",
     "spinsa.vmf",
     "spinsa.references"],
    # files on disk and data sets
    ["spinsa.io", "spinsa.datasets"],
    # methods: fitting, analyses, the backprop baselines (and their one torch trainer); the
    # package's public API
    ["spinsa.fit", "spinsa.analysis", "spinsa._training", "spinsa.baselines",
     "spinsa.sequences", "spinsa.sampling", "spinsa"],
    # figures and reports: views of files, never recompute
    ["spinsa.plotting", "spinsa.report"],
    # orchestration: experiments end to end, benchmarks
    ["spinsa.experiments", "spinsa.bench"],
    # phase scans run experiments
    ["spinsa.scan"],
    # the command line
    ["spinsa.cli"],
]  # fmt: skip


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer(module: str) -> int:
    best, depth = None, -1
    for k, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = k, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and to the docs)"
    return best


def imports(module: str, source: str | None = None) -> set[str]:
    """The spinsa modules ``module`` imports anywhere in its code (functions included);
    ``source``: its code (default: the file's)."""
    if source is None:
        source = MODULES[module].read_text(encoding="utf-8")
    tree = ast.parse(source)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from spinsa import io` imports the module spinsa.io, not the package root
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                for a in node.names
            ]
        else:
            continue
        out.update(n for n in names if n == "spinsa" or n.startswith("spinsa."))
    out.discard(module)
    return {n if n in MODULES else n.rsplit(".", 1)[0] for n in out}


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)


def upward(module: str, imported: set[str]) -> list[str]:
    """The modules of ``imported`` in a layer above ``module``'s."""
    return sorted(t for t in imported if layer(t) > layer(module))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    up = upward(module, GRAPH[module])
    assert not up, f"{module} (layer {layer(module)}) imports from layers above: {up}"


def test_no_import_cycles():
    # Tarjan's strongly connected components over the module graph
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_a_planted_upward_import_is_caught():
    # the checker itself: an import inside a function, from a layer above, is seen
    code = "import numpy\n\ndef f():\n    from spinsa.experiments import reproduce\n"
    found = imports("spinsa.tasks", code)
    assert found == {"spinsa.experiments.reproduce"}
    assert upward("spinsa.tasks", found) == ["spinsa.experiments.reproduce"]
    assert upward("spinsa.scan", found) == []  # the same import from above is fine
