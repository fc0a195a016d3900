#!/usr/bin/env python3
"""The layout's rules, checked on the object files a build made (docs/ARCHITECTURE.md, "Layers").

A file calls another when its object file needs a global symbol (a function or data) that the
other's defines: nm lists both. Within each module given on the command line:
  * no circle of more than two files (a strongly connected component of the call graph), so that
    a change to one file does not need every other;
  * with --order, no file in a lower layer calls up into a higher one (the folders named, highest
    first; files at the module's root are not ranked).
It prints the module's call counts, every violation, and exits 1 on any.

  check_layers.py --nm nm --order server=net,dispatch,handlers,store \
      solver=/b/solver/CMakeFiles/kd_solver.dir/matrix.c.o:... server=...

Registered as the ctest test_layers (tests/CMakeLists.txt).
"""
import argparse
import collections
import os
import subprocess
import sys

GLOBAL = set("TDBRVWGSC")


def source_name(module, obj):
    """'solver/formats/coo.c' for .../CMakeFiles/kd_solver.dir/formats/coo.c.o."""
    rel = obj.split(".dir/", 1)[1] if ".dir/" in obj else os.path.basename(obj)
    if rel.endswith(".o"):
        rel = rel[:-2]
    return f"{module}/{rel}"


def symbols(nm, obj):
    out = subprocess.run([nm, obj], capture_output=True, text=True, check=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in GLOBAL:
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            needed.add(parts[1])
    return defined, needed


def components(graph):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def layer(module, name, order):
    parts = name[len(module) + 1:].split("/")
    return order.index(parts[0]) if len(parts) > 1 and parts[0] in order else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--max-circle", type=int, default=2)
    ap.add_argument("--order", action="append", default=[],
                    help="MODULE=highest,...,lowest: folders of MODULE by layer")
    ap.add_argument("modules", nargs="+", help="MODULE=OBJ:OBJ:... (or ;-separated)")
    args = ap.parse_args()
    orders = {}
    for o in args.order:
        m, folders = o.split("=", 1)
        orders[m] = folders.split(",")
    bad = 0
    for spec in args.modules:
        module, objs = spec.split("=", 1)
        objs = [o for o in objs.replace(";", ":").split(":") if o]
        if not objs:
            print(f"FAIL: {module}: no object files given")
            bad += 1
            continue
        defined, needed = {}, {}
        for obj in objs:
            name = source_name(module, obj)
            d, n = symbols(args.nm, obj)
            needed[name] = n
            for s in d:
                defined.setdefault(s, name)
        graph = collections.defaultdict(set)
        for name, syms in needed.items():
            graph[name]
            for s in syms:
                if s in defined and defined[s] != name:
                    graph[name].add(defined[s])
        edges = sum(len(v) for v in graph.values())
        circles = [c for c in components(graph) if len(c) > args.max_circle]
        print(f"{module}: {len(graph)} files, {edges} calls between them; "
              f"largest circle {max(len(c) for c in components(graph))} file(s)")
        for c in circles:
            bad += 1
            print(f"FAIL: {module}: a circle of {len(c)} files (more than "
                  f"{args.max_circle}): {', '.join(c)}")
        order = orders.get(module)
        if order:
            for a in sorted(graph):
                for b in sorted(graph[a]):
                    la, lb = layer(module, a, order), layer(module, b, order)
                    if la is not None and lb is not None and lb < la:
                        bad += 1
                        print(f"FAIL: {module}: {a} ({order[la]}) calls up into {b} "
                              f"({order[lb]})")
    print("FAIL" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
