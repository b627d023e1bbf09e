"""The ``torch`` writer: one ``.safetensors`` file of ``torch.nn.GRU``/``torch.nn.LSTM`` state dicts,
written with the ``safetensors`` package's NumPy API (no torch needed to write).

The file format, its ``__metadata__["gruconv"]`` document and the safe names are
:mod:`gruconv.writers.torch.safetensors`'s; loading and running are :mod:`gruconv.writers.torch.run`'s (torch imported
lazily).  What goes in:

* a TF1 checkpoint: EVERY stack as one module (``num_layers``, ``bidirectional``) under its scope,
  and every other tensor of the checkpoint under its name made safe — one file however many
  stacks (a state dict holds any number of modules; no ``rest.npz`` beside it).  ``--rnn SCOPE``
  still picks one stack; the other tensors come along either way;
* a Keras HDF5 file (full model or weights only): every ``CuDNNGRU``/``CuDNNLSTM`` (or
  ``Bidirectional`` of one) as a one-layer module under its layer path, and every other layer's
  weights as ``<layer>/<weight>``.  What the Keras layer did around the cell is the caller's:
  ``go_backwards`` (feed the reversed sequence) and a ``Bidirectional`` merge other than
  ``concat`` (PyTorch concatenates the directions) are converted with a warning saying so.

``verify`` runs each module through torch (:meth:`runners`) against the same reference and the same
per-stack checks as a ``.keras`` stack model.
"""

from __future__ import annotations

from pathlib import Path

FORMAT = "torch"
SUFFIX = ".safetensors"
CLAIMS = (".safetensors",)
#: Writes no Keras model: nothing is rebuilt, a ``Lambda`` layer is no obstacle.
#: A bare stack alone, a Keras graph (its RNNs and other weights), or a whole document in one file.
KINDS = ("stack", "graph", "document")
WRITES = "stacks"
#: Needs no architecture: a weights-only Keras file converts as it is.
NEEDS_ARCHITECTURE = False
EVERY_MODEL = False
#: One file for any number of stacks (:func:`write_document`: every stack and the other tensors, so
#: the checkpoint reader writes no ``rest.npz``), never a directory.
MANY = False


def options(kind: str) -> frozenset:
    """A state dict has no model interface: no option of its own (``--initial-state`` & co. refused)."""
    return frozenset()


def _write(target, stacks: list, others, warnings: list) -> None:
    from .safetensors import write_safetensors

    done = write_safetensors(Path(target), stacks, others, force=True)
    warnings.extend(done["warnings"])


def _write_stack(document, entry, target, options, name: str) -> None:
    """One bare stack alone (no other tensors) as a one-module file."""
    _write(target, [(name, entry.stack, f"{document.reader}:{name}")], {}, [])
    document.drop()


def _write_document(document, named_entries: list, target, options, warnings: list) -> None:
    """Every stack of ``named_entries`` (``[(entry, name)]``) and every other tensor of ``document``
    (``document.view(key)``) into the one file ``target``.  Tensors safetensors cannot hold (TF
    strings) are left out with a warning naming them."""
    from ...errors import UnsupportedError

    stacks = [(name, e.stack, f"{document.reader}:{getattr(e, 'source', '') or name}")
              for e, name in named_entries]
    others = {}
    for key in document.other_tensors:
        try:
            others[key] = document.view(key)
        except UnsupportedError as err:
            warnings.append(f"tensor {key!r} not copied ({err.message})")
    _write(target, stacks, others, warnings)
    document.drop()


def _write_graph(document, target, options, warnings: list) -> dict:
    """A Keras HDF5 file's cuDNN layers as one-layer modules (named by layer path) and its other
    layers' weights as ``<layer>/<weight>``.  Returns NaN/Inf counts per layer (carried unchanged)."""
    from ...errors import about

    graph = document.graph
    stacks, nonfinite = [], {}
    for rnn in graph.rnns:
        opts = rnn.options
        if rnn.wrapper == "Bidirectional" and rnn.merge_mode != "concat":
            warnings.append(f"{rnn.path}: Bidirectional merge_mode={rnn.merge_mode!r}; torch.nn."
                            f"{rnn.shape.cell.upper()} concatenates the directions (forward | backward), so "
                            "the merge is the caller's")
        if opts.get("go_backwards"):
            warnings.append(f"{rnn.path}: go_backwards=True; the module runs forward, so feed it the reversed "
                            "sequence (x.flip(1)) as the Keras layer did")
        if rnn.wrapper == "TimeDistributed":
            warnings.append(f"{rnn.path}: inside TimeDistributed; fold the extra axis into the batch "
                            "before calling the module")
        nonfinite[rnn.path] = rnn.stack.nonfinite_count()
        stacks.append((rnn.path, rnn.stack, f"keras:{rnn.cls} {rnn.path}"))
    with about(graph.path), graph.other_weights() as refs:  # streamed: a wide Dense is never whole in memory
        _write(target, stacks, dict(refs), warnings)
    for rnn in graph.rnns:
        rnn.release()
    return nonfinite


def write(document, target, options) -> dict:
    """One bare stack (kind ``stack``), a Keras graph (``graph``) or every stack and other tensor of
    the document (``document``) into one ``.safetensors`` file."""
    if target.kind == "graph":
        return _write_graph(document, target.tmp, options, target.warnings)
    if target.kind == "document":
        named = [(e, name or f"{e.stack.shape.cell}_stack") for e, name in zip(document.stacks, document.names)]
        _write_document(document, named, target.tmp, options, target.warnings)
        return {}
    _write_stack(document, document.stacks[target.stack], target.tmp, options, target.name)
    return {}


def load(path, rebuild):
    """A state dict is not a Keras model: ``verify`` uses :func:`runners`."""
    from ...errors import UsageError

    raise UsageError("a .safetensors file holds torch modules, not a Keras model (gruconv.writers.torch.run.load)", path=path)


def runners(path) -> dict:
    """``{rnn name: StackRunner}``: each module of the file run by torch on the CPU
    (:func:`gruconv.writers.torch.run.run_torch`), shaped for ``verify``'s stack checks
    (:class:`gruconv.writers.runner.StackRunner`)."""
    from . import run as gtorch
    from ...model.canonical import StackShape
    from ..runner import StackRunner
    from .safetensors import CELL_OF_MODULE, read_document

    doc = read_document(path)
    modules = gtorch.load(path)
    out = {}
    for r in doc["rnns"]:
        a = r["args"]
        shape = StackShape(a["input_size"], a["hidden_size"], a["num_layers"], a["bidirectional"],
                           cell=CELL_OF_MODULE[r["module"]], dtype=r["dtype"])

        def run(x, h0, c0, lengths, math, m=modules[r["name"]]):
            return gtorch.run_torch(m, x, h0, c0, lengths, device="cpu" if math is None else "cuda",
                                    strict=math != "default")

        out[r["name"]] = StackRunner(r["name"], shape, run, engine=_engine)
    return out


def _engine(math) -> str:
    if math is None:
        return "torch (CPU)"
    return f"torch (CUDA, cuDNN, {'strict fp32' if math == 'strict' else 'default math'})"


def gpu_status() -> tuple:
    """``(usable, reason, math settings)`` for ``verify --device``: torch's own CUDA (cuDNN's RNN)."""
    try:
        import torch
    except ImportError as e:
        return False, f"torch is not installed ({e})", {}
    ok = torch.cuda.is_available()
    why = f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}" if ok else "torch sees no CUDA device"
    return ok, why, {"strict": "torch.backends.cudnn.rnn.fp32_precision = 'ieee' (no TF32; gruconv.writers.torch.run._fp32_mode)",
                     "default": "torch defaults (cuDNN's RNN may use TF32)"}


def describe(shape) -> dict:
    """``inspect``: the module this target gives a stack of ``shape``."""
    from .safetensors import describe as _describe

    d = _describe(shape)
    args = ", ".join(f"{k}={v}" for k, v in d["args"].items())
    return {"target": f"{d['module']}({args})", "note": d["note"]}
