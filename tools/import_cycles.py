"""Import cycles among the project's own modules (monta/, baselines/ as monta_baselines), read from the source
with ``ast``.

Every ``import`` counts, at module level or inside a function (a lazy import still ties the two
modules together). ``import a.b.c`` and ``from a.b import c`` depend on the module they name (and
``from a.b import c`` on ``a.b.c`` too when that is a module); a package's ``__init__`` is the module
of its dotted name. Relative imports are resolved against the importing module.

Usage: ``python tools/import_cycles.py [--edges] [--forbid SRC:DST ...]``. Prints every cycle (one line
each, as a chain ``a -> b -> a``) and every forbidden edge (``SRC:DST``: no module under SRC imports one
under DST, e.g. ``monta.comm:monta.perfmodel``); exit 1 if there is any, 0 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# installed package name -> its folder (pyproject.toml's package-dir)
PACKAGES = {"monta": "monta", "monta_baselines": "baselines"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages (build outputs and caches left out)."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root / folder)
            if any(part in ("build", "__pycache__") or part.startswith(".") for part in rel.parts):
                continue
            parts = [pkg, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(base: str | None, level: int, module: str, is_package: bool) -> str | None:
    if level == 0:
        return base
    parts = module.split(".")
    parts = parts if is_package else parts[:-1]  # the package the importing module lives in
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([base] if base else [])) or None


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports (anywhere in its file)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, module, is_package)
            if base is None:
                continue
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    out = set()
    for name in names:
        # the longest project module the name starts with (``monta.comm.exchange.run_pass`` -> the module)
        parts = name.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        if parts and ".".join(parts) != module:
            out.add(".".join(parts))
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports(m, p, known) for m, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each strongly connected component that has one (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[set[str]] = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in g.get(v, ()):
                        comps.append(comp)
    out = []
    for comp in comps:
        first = min(comp)
        # breadth-first from `first` back to itself inside the component: the shortest cycle through it
        prev: dict[str, str] = {}
        frontier, seen, end = [first], {first}, None
        while frontier and end is None:
            nxt = []
            for v in frontier:
                for w in sorted(g[v] & comp):
                    if w == first:
                        end = v
                        break
                    if w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            frontier = nxt
        chain = [end]
        while chain[-1] != first:
            chain.append(prev[chain[-1]])
        out.append([*reversed(chain), first])
    return out


def forbidden(g: dict[str, set[str]], rules: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The edges src -> dst where src lies under a rule's SRC and dst under its DST."""

    def under(m: str, pkg: str) -> bool:
        return m == pkg or m.startswith(pkg + ".")

    return sorted((a, b) for a, deps in g.items() for b in deps for s, d in rules if under(a, s) and under(b, d))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--edges", action="store_true", help="also print every import edge")
    p.add_argument("--forbid", action="append", default=[], metavar="SRC:DST", help="no SRC module may import DST")
    args = p.parse_args(argv)
    rules = []
    for r in args.forbid:
        src, sep, dst = r.partition(":")
        if not sep or not src or not dst:
            p.error(f"--forbid {r!r}: give SRC:DST, e.g. monta.comm:monta.perfmodel")
        rules.append((src, dst))
    g = graph()
    if args.edges:
        for a in sorted(g):
            for b in sorted(g[a]):
                print(f"{a} -> {b}")
    found = cycles(g)
    bad = forbidden(g, rules)
    n_edges = sum(len(v) for v in g.values())
    print(f"{len(g)} modules, {n_edges} imports (module- and function-level) in {', '.join(PACKAGES)}")
    for c in found:
        print("cycle: " + " -> ".join(c))
    for a, b in bad:
        print(f"forbidden: {a} imports {b}")
    if not found and not bad:
        print("no import cycle" + (f"; none of {', '.join(args.forbid)}" if rules else ""))
    return 1 if found or bad else 0


if __name__ == "__main__":
    sys.exit(main())
