"""Checks of the code's shape that no compiler makes, run by .ci/run:

- no module import circles inside a crate: a module imported back by the modules it calls has
  its boundary in the wrong place (STYLE.md);
- every exchange ends in one place (`Call::end`): no transport hands an outcome to the journal
  itself, so `journal.log(` appears only where the journal and the exchange's end live.

Exits 1 naming what it found."""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["providers", "runlog", "cassettes", "review", "daemon", "runner-plugin", "cargo-llmreplay"]


def code_of(path):
    """A source file without its tests (everything from the first `#[cfg(test)]`)."""
    with open(path, encoding="utf-8") as f:
        return f.read().split("#[cfg(test)]")[0]


def module_graph(crate):
    src = os.path.join(ROOT, crate, "src")
    graph = {}
    for path in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True):
        rel = os.path.relpath(path, src)[:-3].replace(os.sep, "/")
        if rel in ("lib", "main") or rel.startswith("bin/"):
            continue
        top = rel.split("/")[0]
        text = code_of(path)
        deps = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", text))
        for group in re.findall(r"use crate::\{([^}]*)\}", text, re.S):
            deps.update(p.strip().split("::")[0] for p in group.split(",") if p.strip())
        graph.setdefault(top, set()).update(d for d in deps if d != top)
    return graph


def circles(graph):
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    failed = False
    for crate in CRATES:
        for group in circles(module_graph(crate)):
            print(f"{crate}: modules import each other in a circle: {' -> '.join(group)}")
            failed = True
    allowed = {os.path.join("daemon", "src", "journal.rs"), os.path.join("daemon", "src", "call.rs")}
    for path in glob.glob(os.path.join(ROOT, "daemon", "src", "**", "*.rs"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel in allowed:
            continue
        code = code_of(path)
        # A call split over lines (`state\n.journal\n.log(call, ...)`) is found too.
        for found in re.finditer(r"journal\s*\.\s*log\s*\(", code):
            n = code.count("\n", 0, found.start()) + 1
            print(f"{rel}:{n}: an exchange handed to the journal by hand; end it with Call::end")
            failed = True
    if failed:
        sys.exit(1)
    print("checks: no module circles; every exchange ends in Call::end")


main()
