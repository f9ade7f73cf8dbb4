"""Import cycles and private names across the project's modules.

Every import counts: module level, inside functions, and under ``if TYPE_CHECKING:``. An edge
``a -> b`` means module ``a`` names module ``b`` in an import statement (``import b``,
``from b import x``, or ``from pkg import b`` where ``b`` is a submodule of ``pkg``). Importing
``pkg.sub`` also runs ``pkg/__init__.py``, so the edge ``a -> pkg`` is added for every parent
package that is not ``a``'s own ancestor.

Cycles are the strongly connected components of that graph with more than one module.
A registry package and its plugin files are exempt (:data:`REGISTRIES`): the registry finds its
plugins by discovery, and a plugin imports the registry to register itself.

Private names: ``from m import _x`` for a project module ``m`` (a leading underscore, not a
dunder), and ``name._x`` where ``name`` was bound by importing a project module, are reported as
crossing a module boundary.

Re-exports: ``from m import n`` where ``m`` is not a package ``__init__`` and only imported ``n``
itself; the importer should name the module that defines ``n``.

Run ``python tools/import_cycles.py``: it prints every cycle, private use and re-export, and
exits 1 if there is any (``tests/test_layout.py`` runs it).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("simulator", "actors", "attacks", "defenses", "ledger", "benchmarks", "tools")
REGISTRIES: tuple[str, ...] = (  # packages whose plugin files may import them back
    "simulator.algorithms",
    "simulator.policies",
    "simulator.placement",
)


def module_name(path: Path, root: Path) -> str:
    """``simulator/round/engine.py`` -> ``simulator.round.engine``; ``pkg/__init__.py`` ->
    ``pkg``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every project module by dotted name."""
    found: dict[str, Path] = {}
    for pkg in packages:
        base = root / pkg
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if "node_modules" in path.parts or "__pycache__" in path.parts:
                continue
            found[module_name(path, root)] = path
    return found


def _resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    """The absolute module a relative ``from ... import`` names."""
    if level == 0:
        return target or ""
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(mod: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """The project modules ``mod`` imports, and its uses of other modules' private names."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    edges: set[str] = set()
    private: list[str] = []
    bound: dict[str, str] = {}  # local name -> project module it is bound to

    def add(target: str) -> None:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in modules and name != mod and not mod.startswith(name + "."):
                edges.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    add(alias.name)
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, is_pkg, node.level, node.module)
            if base.split(".")[0] not in PACKAGES:
                continue
            add(base)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    add(sub)
                    bound[alias.asname or alias.name] = sub
                elif _is_private(alias.name):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    private.append(f"{where}: from {base} import {alias.name}")
    private.extend(_private_attributes(tree, path, bound))
    return edges, private


#: other libraries' private attributes read through a local name (the reason beside each)
FOREIGN_PRIVATE: dict[str, str] = {}


def _private_attributes(tree: ast.Module, path: Path, bound: dict[str, str]) -> list[str]:
    """``name._x`` reads where ``name`` is not ``self``/``cls``, not another library's module and
    not a class or function this module defines."""
    private: list[str] = []
    external = {  # names bound to other packages' modules: their privates are not ours to judge
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        and not (isinstance(n, ast.ImportFrom) and (n.level or "").__class__ is int and n.level)
        and ((n.module or "") if isinstance(n, ast.ImportFrom) else "").split(".")[0]
        not in PACKAGES
        for a in n.names
        if isinstance(n, ast.ImportFrom) or a.name.split(".")[0] not in PACKAGES
    }
    own = {  # classes and functions this module defines: their privates are its own
        n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id not in ("self", "cls")
            and node.value.id not in external
            and node.value.id not in own
            and _is_private(node.attr)
            and f"{node.value.id}.{node.attr}" not in FOREIGN_PRIVATE
        ):
            private.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    return private


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph over project modules, and every private-name use."""
    modules = project_modules(root, PACKAGES)
    edges: dict[str, set[str]] = {}
    private: list[str] = []
    for mod, path in modules.items():
        edges[mod], priv = imports_of(mod, path, modules)
        private.extend(priv)
    return edges, private


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module defines at top level, and the names it imports from project modules."""
    defined: set[str] = set()
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] in PACKAGES
        ):
            imported |= {a.asname or a.name for a in node.names}
    return defined, imported


def reexports(root: Path = ROOT, consumers: Iterable[str] = ("tests",)) -> list[str]:
    """``from m import n`` where ``m`` is a project module but not a package ``__init__`` and
    ``n`` is a name ``m`` itself imported (a re-export: only a package ``__init__`` may do
    that). Project modules and the files under ``consumers`` are checked as importers."""
    modules = project_modules(root, PACKAGES)
    names = {m: _top_level_names(ast.parse(p.read_text(), str(p))) for m, p in modules.items()}
    files = list(modules.items()) + [
        (module_name(p, root), p) for c in consumers for p in sorted((root / c).rglob("*.py"))
    ]
    found: list[str] = []
    for _, path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module in modules
                and modules[node.module].name != "__init__.py"
            ):
                continue
            defined, imported = names[node.module]
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if alias.name in imported and alias.name not in defined and sub not in modules:
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    found.append(f"{where}: {alias.name} from {node.module}")
    return found


def _exempt(a: str, b: str) -> bool:
    return any(
        (a == reg and b.startswith(reg + ".")) or (b == reg and a.startswith(reg + "."))
        for reg in REGISTRIES
    )


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = []
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(b for b in edges[start] if not _exempt(start, b)))))
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in edges:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(b for b in edges[nxt] if not _exempt(nxt, b)))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def main() -> int:
    edges, private = graph()
    found = cycles(edges)
    n_edges = sum(len(v) for v in edges.values())
    print(f"{len(edges)} modules, {n_edges} import edges (every import counted)")
    for comp in found:
        inner = {a: sorted(b for b in edges[a] if b in comp) for a in comp}
        links = "; ".join(f"{a} -> {', '.join(bs)}" for a, bs in inner.items())
        print(f"cycle of {len(comp)}: {links}")
    for line in private:
        print(f"private name across modules: {line}")
    again = reexports()
    for line in again:
        print(f"re-exported name (import it from where it is defined): {line}")
    print(
        f"{len(found)} import cycles, {len(private)} private names used across modules, "
        f"{len(again)} re-exports outside a package __init__"
    )
    return 1 if found or private or again else 0


if __name__ == "__main__":
    sys.exit(main())
