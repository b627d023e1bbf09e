"""Issue 19, second question: is the ~3e-5 that torch's cuDNN call shows on the trained fixtures a
configuration real cuDNN itself can produce, or something of torch's own?

Runs each canonical stack of the given TF1 checkpoints through gruconv's ctypes cuDNN runner under every
combination of the descriptor settings a framework may choose (algorithm, forward mode, data layout,
math type, padded IO; the algorithm through ``cudnn_rnn.run(algo=...)``) and prints max |y - float64 oracle| for each, next to torch.nn.GRU/LSTM on CUDA
(unpacked as Keras calls it, and packed).  A probe: it patches :mod:`gruconv.verify.reference.cudnn_rnn`'s module
constants, which that module reads at call time.

Usage (GPU machine): python3 scripts/gpu_cudnn_variants.py fixtures/trained/gru2.tf1 ...
"""
import itertools
import sys
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")
from gruconv.verify.reference import cudnn_rnn as cr # noqa: E402
from gruconv import readers # noqa: E402
from gruconv.options import Options # noqa: E402
from gruconv.model.cudnn_layout import pack # noqa: E402
from gruconv.verify.reference.oracle import run_stack # noqa: E402

ALGOS = {name.upper(): name for name in cr.ALGORITHMS}
MODES = {"inference": 0, "training": 1}
LAYOUTS = {"seq_unpacked": 0, "seq_packed": 1, "batch_unpacked": 2}
MATHS = {"FMA": 3, "DEFAULT": 0}
PADDED = {"padded_io_on": 1, "padded_io_off": 0}
T, B = 100, 2


def one(stack, x, algo, mode, layout, math, padded):
    cr.CUDNN_FWD_MODE_INFERENCE = mode
    cr.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED = layout
    cr.CUDNN_RNN_PADDED_IO_ENABLED = padded
    orig = cr._math_candidates
    cr._math_candidates = lambda dt, tf32: [(cr.CUDNN_DATA_FLOAT, cr.CUDNN_DATA_FLOAT, math)]
    try:
        xin = x.transpose(1, 0, 2).copy() if layout == 2 else x   # batch-major data for that layout
        y = cr.run(pack(stack.params, stack.shape), stack.shape, xin, algo=algo)[0]
        return y.transpose(1, 0, 2) if layout == 2 else y
    finally:
        cr._math_candidates = orig


def torch_rows(path, x, y64):
    import subprocess
    import tempfile

    import torch

    import gruconv.torch as gt

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    out = Path(tempfile.mkdtemp()) / "m.safetensors"
    subprocess.run([sys.executable, "-m", "gruconv", "convert", str(path), str(out)], check=True,
                   capture_output=True)
    rows = []
    for name, mod in gt.load(out).items():
        g = mod.float().to("cuda")
        xb = torch.from_numpy(x.transpose(1, 0, 2).copy()).cuda()
        for training in (True, False):
            g.train(training)
            with torch.no_grad():
                yu = g(xb)[0].cpu().numpy().transpose(1, 0, 2)
                pk = torch.nn.utils.rnn.pack_padded_sequence(xb, [T] * B, batch_first=True)
                yp = torch.nn.utils.rnn.pad_packed_sequence(g(pk)[0], batch_first=True)[0]
                yp = yp.cpu().numpy().transpose(1, 0, 2)
            rows.append((f"torch {name} train={training} unpacked", float(np.abs(yu - y64).max())))
            rows.append((f"torch {name} train={training} packed", float(np.abs(yp - y64).max())))
    return rows


for path in sys.argv[1:]:
    doc = readers.module(readers.detect(Path(path))).read(Path(path), Options())
    for cs in doc.stacks:
        stack = cs.stack
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (T, B, stack.shape.input_size)).astype("float32")
        y64 = run_stack(stack, x)[0]
        print(f"\n{path} {cs.scope}: {stack.shape.describe()}, T={T} B={B}, max |y - float64|")
        for (an, a), (mn, m), (ln, lay), (tn, t), (pn, p) in itertools.product(
                ALGOS.items(), MODES.items(), LAYOUTS.items(), MATHS.items(), PADDED.items()):
            label = f"{an:22} {mn:9} {ln:14} {tn:7} {pn:13}"
            try:
                err = float(np.abs(one(stack, x, a, m, lay, t, p) - y64).max())
                print(f"  {label} {err:.3e}", flush=True)
            except Exception as e:  # noqa: BLE001 - a probe: say what cuDNN refused
                print(f"  {label} refused: {str(e).splitlines()[0][:110]}", flush=True)
        try:
            for label, err in torch_rows(path, x, y64):
                print(f"  {label:70} {err:.3e}")
        except Exception as e:  # noqa: BLE001
            print(f"  torch rows failed: {e}")
