#!/usr/bin/env python3
"""The gateway's folder graph: which folder of src/gateway/ imports which, from the
`crate::gateway::X` and `super::X` paths in each file, and the circles among them.

    python3 scripts/module_graph.py          # edges, then circles (exit 1 if any)
    python3 scripts/module_graph.py --dot    # Graphviz, for `dot -Tsvg`
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "gateway"


def owner(path: Path) -> str:
    """The folder (or loose file) of src/gateway a source file belongs to."""
    first = path.relative_to(ROOT).parts[0]
    return first[:-3] if first.endswith(".rs") else first


def units() -> set:
    return {owner(p) for p in ROOT.rglob("*.rs")} - {"mod"}


def edges() -> dict:
    known = units()
    graph = {unit: set() for unit in known}
    for path in ROOT.rglob("*.rs"):
        source_unit = owner(path)
        if source_unit == "mod":
            continue
        text = path.read_text()
        # Test code may reach anywhere: only the code before `mod tests` counts.
        text = text.split("#[cfg(test)]")[0]
        # Doc links name modules without depending on them: comments do not count.
        text = re.sub(r"//.*", "", text)
        targets = set(re.findall(r"crate::gateway::(\w+)", text))
        if path.parent == ROOT:  # a loose file: `super::X` is a sibling
            targets |= set(re.findall(r"\bsuper::(\w+)", text))
        for target in targets & known:
            if target != source_unit:
                graph[source_unit].add(target)
    return graph


def circles(graph: dict) -> list:
    """Strongly connected components of more than one unit (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    graph = edges()
    if "--dot" in sys.argv:
        print("digraph gateway {")
        for source in sorted(graph):
            for target in sorted(graph[source]):
                print(f'  "{source}" -> "{target}";')
        print("}")
        return 0
    for source in sorted(graph):
        if graph[source]:
            print(f"{source} -> {', '.join(sorted(graph[source]))}")
    found = circles(graph)
    for component in found:
        print("circle: " + " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
