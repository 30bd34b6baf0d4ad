#!/usr/bin/env python3
"""include-graph.py — checks that a source folder's modules form no circle.

A module is a file stem: x.c and x.h are one module, x. Module a uses
module b when a.c or a.h includes "b.h" (quoted includes only; system and
<...> headers are not modules). The check fails, naming each circle, when
the graph of uses has one: with no circle, every module sits on a floor
above all it uses and no include points back up.

Usage: include-graph.py DIR [DIR ...]   (exit 0: no circle; 1: circles printed)
       include-graph.py --floors DIR     (prints each module's floor, top first)
"""
import os
import re
import sys
from typing import Dict, List, Set

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def modules(dirs: List[str]) -> Dict[str, Set[str]]:
    """Each module of dirs and the modules of dirs it includes."""
    files: Dict[str, List[str]] = {}
    for d in dirs:
        for name in sorted(os.listdir(d)):
            stem, ext = os.path.splitext(name)
            if ext in (".c", ".h"):
                files.setdefault(stem, []).append(os.path.join(d, name))
    uses: Dict[str, Set[str]] = {m: set() for m in files}
    for m, paths in files.items():
        for path in paths:
            with open(path, encoding="utf-8") as f:
                for inc in INCLUDE.findall(f.read()):
                    target = os.path.splitext(os.path.basename(inc))[0]
                    if target in files and target != m:
                        uses[m].add(target)
    return uses


def circles(uses: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(uses[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(uses):
        if v not in index:
            visit(v)
    return found


def floors(uses: Dict[str, Set[str]]) -> Dict[str, int]:
    """Floor 1: uses nothing here; otherwise one above the highest it uses."""
    floor: Dict[str, int] = {}

    def of(m: str) -> int:
        if m not in floor:
            floor[m] = 1 + max((of(u) for u in uses[m]), default=0)
        return floor[m]

    for m in uses:
        of(m)
    return floor


def main(argv: List[str]) -> int:
    show_floors = bool(argv) and argv[0] == "--floors"
    dirs = argv[1:] if show_floors else argv
    if not dirs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    uses = modules(dirs)
    found = circles(uses)
    for group in found:
        ties = [f"{a} -> {b}" for a in group for b in sorted(uses[a]) if b in group]
        print(f"circle of {len(group)} modules: {', '.join(group)}")
        print(f"  includes inside it: {'; '.join(ties)}")
    if found:
        return 1
    if show_floors:
        for m, f in sorted(floors(uses).items(), key=lambda x: (-x[1], x[0])):
            print(f"{f:3d}  {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
