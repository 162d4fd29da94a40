#!/usr/bin/env python3
"""The include graph of src/ by module (a .c and its .h are one module; name_internal.h belongs to name):
exits 1 when two modules include each other through any chain (a cycle), or when a module includes one
of a higher layer (core < config, model, ops < memory, data < train < cli; config/run_translation, which
turns the run configuration into the plan, the trainable spec and the optimizer's settings, sits with train).

usage: include_graph.py [SRC_DIR]
"""
import collections
import os
import re
import sys

LAYER = {"core": 0, "config": 1, "dist": 1, "model": 1, "ops": 1, "memory": 2, "data": 2, "train": 3, "cli": 4,
         "config/run_translation": 3}


def layer(module_name):
    return LAYER.get(module_name, LAYER.get(module_name.split("/")[0]))


def module(path):
    name = os.path.splitext(path)[0]
    return name[: -len("_internal")] if name.endswith("_internal") else name


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    edges = collections.defaultdict(set)
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(root, f)
            a = module(os.path.relpath(path, src))
            with open(path, encoding="utf-8", errors="replace") as fh:
                for inc in re.findall(r'^#include "([^"]+)"', fh.read(), re.M):
                    b = module(inc)
                    if b != a and os.path.exists(os.path.join(src, inc)):
                        edges[a].add(b)
    problems = []
    for a, bs in sorted(edges.items()):
        for b in sorted(bs):
            la, lb = layer(a), layer(b)
            if la is not None and lb is not None and lb > la:
                problems.append(f"upward include: {a} -> {b}")
    # cycles: Tarjan's strongly connected components
    index, low, stack, on, counter = {}, {}, [], set(), [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                problems.append("include cycle: " + " <-> ".join(sorted(component)))

    for v in list(edges):
        if v not in index:
            visit(v)
    for p in problems:
        print(p)
    print(f"include graph: {len(edges)} modules, {sum(len(b) for b in edges.values())} edges, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
