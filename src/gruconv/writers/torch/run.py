"""Load and run the PyTorch target: ``gruconv.writers.torch.run.load(path)`` -> ready ``torch.nn.GRU``/``LSTM`` modules.

torch is imported inside the functions only (``import gruconv.writers.torch.run`` costs nothing), and only
after :func:`gruconv.writers.torch.safetensors.read_document` has validated the file's metadata against its
header: module arguments are bounded integers, every tensor is present with exactly the shape
``torch.nn.<module>(**args)`` allocates, so a hostile file cannot make us allocate more than it
stores.  Problems are one-line :class:`gruconv.errors.InputError`.

The load code a user writes without gruconv (docs/targets.md "To PyTorch", run as written in tests/writers/test_torch_target.py)::

    import json, torch
    from safetensors.torch import load_file
    from safetensors import safe_open
    with safe_open("out.safetensors", "pt") as f:
        doc = json.loads(f.metadata()["gruconv"])
    sd = load_file("out.safetensors")
    rnns = {}
    for r in doc["rnns"]:
        m = getattr(torch.nn, r["module"])(r["input_size"], r["hidden_size"], r["num_layers"],
                                           batch_first=True, bidirectional=r["bidirectional"])
        m.load_state_dict({k[len(r["prefix"]):]: v for k, v in sd.items() if k.startswith(r["prefix"])})
        rnns[r["name"]] = m
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Optional

import numpy as np

from ...errors import InputError, ReferenceUnavailable, UsageError
from .safetensors import read_document, read_tensors


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ReferenceUnavailable(f"PyTorch is not installed ({e}); pip install 'gruconv[torch]'") from None
    return torch


def load(path, device: str = "cpu") -> dict:
    """``{rnn name: torch.nn.GRU | torch.nn.LSTM}`` from a gruconv ``.safetensors`` file, in eval mode,
    with the file's dtype (float32 unless the original was float16/float64), on ``device``."""
    torch = _torch()
    doc = read_document(path)
    arrays = read_tensors(path, [k for r in doc["rnns"] for k in r["keys"]])
    out = {}
    for r in doc["rnns"]:
        cls = getattr(torch.nn, r["module"])
        dtype = getattr(torch, r["dtype"])
        with torch.device("meta"):
            module = cls(**r["args"], dtype=dtype)
        sd = {k[len(r["prefix"]):]: torch.from_numpy(np.array(arrays[k])) for k in r["keys"]}
        try:
            module.load_state_dict(sd, strict=True, assign=True)
        except RuntimeError as e:  # not reachable after read_document's checks; kept as a guard
            raise InputError(f"RNN {r['name']!r}: {str(e).splitlines()[0]}", path=path) from None
        module = module.to(device).eval()
        if device != "cpu" and hasattr(module, "flatten_parameters"):
            module.flatten_parameters()
        out[r["name"]] = module
    return out


@contextlib.contextmanager
def _fp32_mode(torch, strict: bool):
    """Strict fp32 on a GPU: no TF32 in cuDNN's RNN or cuBLAS (torch lets cuDNN use TF32 by default,
    which moves cuDNN's GRU by 1e-4..5e-4: ``shared/DESIGN.md``); restored afterwards.

    torch 2.9+ has per-backend ``fp32_precision`` settings and refuses to read the legacy
    ``allow_tf32`` flags once they disagree (measured, torch 2.11: ``RuntimeError ... a mix of the
    legacy and new APIs``), so the new API is used where it exists, the legacy flags elsewhere.
    """
    if not strict:
        yield
        return
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    matmul = torch.backends.cuda.matmul
    if rnn is not None and hasattr(rnn, "fp32_precision") and hasattr(matmul, "fp32_precision"):
        saved = (rnn.fp32_precision, matmul.fp32_precision)
        rnn.fp32_precision, matmul.fp32_precision = "ieee", "ieee"
        try:
            yield
        finally:
            rnn.fp32_precision, matmul.fp32_precision = saved
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = (torch.backends.cudnn.allow_tf32, matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = False
        matmul.allow_tf32 = False
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32, matmul.allow_tf32 = saved


def _pick(modules, name: Optional[str], path=None):
    torch = _torch()
    if isinstance(modules, (str, os.PathLike)):
        path = modules
        modules = load(modules)
    if isinstance(modules, torch.nn.Module):
        return modules
    if name is None:
        if len(modules) != 1:
            raise UsageError(f"the file holds {len(modules)} RNNs ({', '.join(map(repr, modules))}); name one", path=path)
        return next(iter(modules.values()))
    if name not in modules:
        raise UsageError(f"no RNN named {name!r} (the file has {', '.join(map(repr, modules))})", path=path)
    return modules[name]


def run_torch(path_or_modules, x, h0=None, c0=None, seq_lengths=None, *, name: Optional[str] = None,
              device: str = "cpu", strict: bool = True) -> tuple:
    """Run a converted module the way :func:`gruconv.verify.reference.oracle.run_stack` runs a canonical stack.

    ``x`` time-major ``(T, B, input_size)`` (the oracle's and cuDNN runner's layout; the module is
    batch-first, so it is transposed here), ``h0``/``c0`` ``(layers*dirs, B, units)``,
    ``seq_lengths`` ``(B,)`` (then the batch goes through ``pack_padded_sequence``: outputs past a
    length are 0 and the final states are those at each sequence's last valid step, as cuDNN's
    padded I/O gives them).  Returns NumPy ``(y (T, B, dirs*units), hy, cy or None)``.

    ``device="cuda"`` runs cuDNN's RNN through PyTorch; ``strict`` turns TF32 off for the call.
    """
    torch = _torch()
    module = _pick(path_or_modules, name)
    p = next(module.parameters())
    module = module.to(device)
    if device != "cpu":
        module.flatten_parameters()
    dt = p.dtype
    xt = torch.as_tensor(np.ascontiguousarray(np.asarray(x).transpose(1, 0, 2)), dtype=dt, device=device)
    T, B = xt.shape[1], xt.shape[0]
    lstm = isinstance(module, torch.nn.LSTM)
    state = None
    if h0 is not None or c0 is not None:
        shape = (module.num_layers * (2 if module.bidirectional else 1), B, module.hidden_size)
        h = torch.zeros(shape, dtype=dt, device=device) if h0 is None else torch.as_tensor(np.asarray(h0), dtype=dt, device=device)
        if lstm:
            c = torch.zeros(shape, dtype=dt, device=device) if c0 is None else torch.as_tensor(np.asarray(c0), dtype=dt, device=device)
            state = (h, c)
        else:
            state = h
    with torch.no_grad(), _fp32_mode(torch, strict and device != "cpu"):
        if seq_lengths is None:
            y, st = module(xt, state)
        else:
            lengths = torch.as_tensor(np.asarray(seq_lengths).astype(np.int64))
            packed = torch.nn.utils.rnn.pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False)
            yp, st = module(packed, state)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(yp, batch_first=True, total_length=T)
        if device != "cpu":
            torch.cuda.synchronize()
    hy, cy = (st[0], st[1]) if lstm else (st, None)
    to_np = lambda t: None if t is None else t.detach().cpu().numpy()  # noqa: E731
    return np.ascontiguousarray(to_np(y).transpose(1, 0, 2)), to_np(hy), to_np(cy)
