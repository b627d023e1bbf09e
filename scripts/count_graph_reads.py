#!/usr/bin/env python
"""Usage: PYTHONPATH=SRC python scripts/count_graph_reads.py INPUT [onnx|saved-model|keras]

Count the opens of a graph input's graph file (saved_model.pb / the frozen .pb) in gruconv's own process
during one `api.convert`, by an audit hook that names the caller of each open.  Children (the bounded runs)
are not counted: TensorFlow's own parse there is the writer's."""
import collections, os, sys, tempfile, traceback
from pathlib import Path

src, fmt = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else None)
graph = src / "saved_model.pb" if src.is_dir() else src
seen = collections.Counter()
target = os.path.realpath(graph)


def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        try:
            p = os.path.realpath(os.fsdecode(args[0]))
        except Exception:
            return
        if p == target:
            st = [f for f in traceback.extract_stack()[:-1] if "gruconv" in f.filename]
            where = " <- ".join(f"{Path(f.filename).name}:{f.name}" for f in st[-3:][::-1])
            seen[where] += 1


from gruconv import api  # noqa: E402

sys.addaudithook(hook)
with tempfile.TemporaryDirectory() as d:
    out = Path(d) / ({"onnx": "m.onnx", "keras": "m.keras"}.get(fmt, "out"))
    api.convert(src, out, **({"format": fmt} if fmt in ("saved-model",) else {}))
print(f"{src.name} -> {out.name}: {sum(seen.values())} opens of {graph.name} in gruconv's process")
for k, v in seen.most_common():
    print(f"  {v} x {k}")
