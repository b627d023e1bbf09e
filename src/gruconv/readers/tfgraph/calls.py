"""Which library functions call which: a function library that calls itself is refused before TensorFlow
sees it.

Why: TensorFlow has no recursive functions, and instantiating one whose calls loop (``f`` calls ``g`` calls
``f``) does not fail cleanly: TensorFlow 2.21 crashed (segmentation fault, a stack overflow) converting such a
frozen graph here, when the graph was imported and run (measured: ``tests/writers/test_saved_model.py``).
So a cycle is found here, without TensorFlow, and the graph refused in one line.

A call is a node whose ``op`` names a library function (``tensorflow/core/framework/function.h``: a function
is an op of the library), or a function named in a node's attrs (``AttrValue.func``, ``list.func``: ``While``
bodies, ``PartitionedCall``'s ``f``, ``If`` branches).
"""

from __future__ import annotations

from typing import Optional


def _names(value) -> list:
    out = []
    func = value.get("func")
    if func is not None:
        out.append(func.get("name", ""))
    lst = value.get("list")
    if lst is not None:
        out += [f.get("name", "") for f in lst.each("func")]
    return out


def call_graph(graph) -> dict:
    """``{function: set of the library functions it calls}`` for one GraphDef message."""
    bodies = {}
    for lib in graph.each("library"):
        for f in lib.each("function"):
            sig = f.get("signature")
            bodies[sig.get("name", "") if sig is not None else ""] = f
    calls = {}
    for name, f in bodies.items():
        called = set()
        for node in f.each("node_def"):
            for field, value in node.fields("op", "attr"):
                if field == "op":
                    if value in bodies:
                        called.add(value)
                elif value.get("value") is not None:
                    called.update(n for n in _names(value.get("value")) if n in bodies)
        calls[name] = called
    return calls


def cycle(calls: dict) -> Optional[list]:
    """One cycle of the call graph as ``[f, g, ..., f]``, or None (iterative: a deep chain costs no stack)."""
    state: dict = {}
    for start in calls:
        if start in state:
            continue
        stack = [(start, iter(sorted(calls[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(calls.get(nxt, ())))))
                path.append(nxt)
    return None
