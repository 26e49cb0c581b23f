"""The package structure: every kvdiv module imports on its own in a fresh interpreter, and the packages import
each other without a cycle (the pipeline's stages build on each other in one direction)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from kvdiv.codehash import PACKAGE_DIR, imported_modules, module_name

REPO = Path(__file__).resolve().parents[1]
MODULES = sorted(module_name(p) for p in PACKAGE_DIR.rglob("*.py"))
#: Third-party libraries imported once before the per-module interpreters fork (they are not what is tested).
THIRD_PARTY = (
    "numpy",
    "scipy",
    "torch",
    "transformers",
    "kvpress",
    "polars",
    "numba",
    "zarr",
    "xarray",
    "matplotlib",
    "yaml",
)


def test_every_module_imports_in_a_fresh_interpreter():
    """Each module is imported first in its own forked child of an interpreter that has imported no kvdiv module,
    so an import that works only after another kvdiv module (an order dependence, a cycle) fails."""
    script = textwrap.dedent(f"""
        import importlib, os, sys, traceback
        for name in {THIRD_PARTY!r}:
            importlib.import_module(name)
        assert not [m for m in sys.modules if m.split(".")[0] == "kvdiv"]
        failed = []
        for module in sys.argv[1:]:
            pid = os.fork()
            if pid == 0:
                try:
                    importlib.import_module(module)
                except BaseException:
                    traceback.print_exc()
                    os._exit(1)
                os._exit(0)
            if os.waitpid(pid, 0)[1] != 0:
                failed.append(module)
        print("FAILED", failed)
        sys.exit(1 if failed else 0)
    """)
    assert len(MODULES) > 60
    proc = subprocess.run(
        [sys.executable, "-c", script, *MODULES], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


def unit(module: str) -> str:
    """The top-level unit of kvdiv a module belongs to: its subpackage (``kvdiv.kernel``) or itself (``kvdiv.io``)."""
    return ".".join(module.split(".")[:2])


def edges(granularity) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        source = module_name(path)
        for target in imported_modules(path, packages=False):
            a, b = granularity(source), granularity(target)
            if a != b:
                graph.setdefault(a, set()).add(b)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of nodes, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_between_packages():
    """Imports anywhere in a module (function-level and TYPE_CHECKING ones included) count."""
    graph = edges(unit)
    assert find_cycle(graph) is None, f"import cycle between packages: {' -> '.join(find_cycle(graph))}"
    # the pipeline's direction: the model side never needs the samplers, stores, metrics or analysis, and model
    # provisioning never needs the kernel
    downstream = {"kvdiv.trajectories", "kvdiv.metrics", "kvdiv.analysis", "kvdiv.outputs"}
    assert not graph.get("kvdiv.kernel", set()) & downstream
    assert not graph.get("kvdiv.models", set()) & (downstream | {"kvdiv.kernel"})
    assert not graph.get("kvdiv.analysis", set()) & {
        "kvdiv.outputs",
        "kvdiv.trajectories",
        "kvdiv.kernel",
        "kvdiv.models",
    }


def test_no_import_cycle_between_modules():
    graph = edges(lambda m: m)
    assert find_cycle(graph) is None, f"import cycle between modules: {' -> '.join(find_cycle(graph))}"


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_no_module_is_over_450_lines():
    """A module past 450 lines holds more than one concept: split it (issue 20's rule, kept)."""
    long = {
        p.relative_to(PACKAGE_DIR).as_posix(): n
        for p in PACKAGE_DIR.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450
    }
    assert not long, long
