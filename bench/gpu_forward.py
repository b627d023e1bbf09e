"""GPU forward speed of a converted GRU stack (Keras 3, torch backend) vs cuDNN directly vs a lost fast path.

Run on a machine with an NVIDIA GPU and PyTorch (the device session script
`scripts/gpu_session.sh` does).  Prints one Markdown table.  The stack is
3 bidirectional layers x 1024 units (the issue's "large model"), batch 32,
100 steps, float32, strict fp32 (TF32 off in torch).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from gruconv.model.canonical import GateParams, RNNStack, StackShape # noqa: E402
from gruconv.keras3.config import stack_model_config # noqa: E402
from gruconv.keras3.build import build_stack_model # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

I, H, L, B, T = 512, 1024, 3, 32, 100


def timed(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    import keras

    rng = np.random.default_rng(0)
    shape = StackShape(I, H, L, True)
    params = []
    for layer in range(L):
        n_in = shape.layer_input_size(layer)
        for _ in range(2):
            params.append(GateParams(
                rng.uniform(-0.05, 0.05, (3, H, n_in)).astype("float32"),
                rng.uniform(-0.03, 0.03, (3, H, H)).astype("float32"),
                rng.uniform(-0.1, 0.1, (3, H)).astype("float32"),
                rng.uniform(-0.1, 0.1, (3, H)).astype("float32")))
    stack = RNNStack("bench", shape, params)
    x = rng.uniform(-1, 1, (B, T, I)).astype("float32")
    model = build_stack_model(stack, stack_model_config(shape, "bench"))
    xt = torch.tensor(x, device="cuda")
    with torch.no_grad():
        t_keras = timed(lambda: model(xt))
        ref = torch.nn.GRU(I, H, L, batch_first=True, bidirectional=True).cuda()
        t_cudnn = timed(lambda: ref(xt))
        slow = build_stack_model(stack, stack_model_config(shape, "bench"))
        for layer in slow.layers:
            for g in (getattr(layer, "forward_layer", None), getattr(layer, "backward_layer", None)):
                if g is not None:  # what a Keras 2.0-2.2 default conversion gives: no cuDNN kernel
                    g.cell.recurrent_activation = keras.activations.hard_sigmoid
                    g.use_cudnn = False
        t_slow = timed(lambda: slow(xt), reps=3)
    print(f"| GPU | {torch.cuda.get_device_name()} | torch {torch.__version__} | keras {keras.__version__} "
          f"| cuDNN {torch.backends.cudnn.version()} |")
    print("| forward, 3 x bi-GRU 1024, batch 32, 100 steps, fp32 | median s | vs cuDNN |")
    print("| --- | --- | --- |")
    print(f"| torch.nn.GRU (cuDNN directly) | {t_cudnn:.4f} | 1.00x |")
    print(f"| converted Keras 3 model (torch backend) | {t_keras:.4f} | {t_keras / t_cudnn:.2f}x |")
    print(f"| same, hard_sigmoid (no cuDNN path) | {t_slow:.4f} | {t_slow / t_cudnn:.2f}x |")


if __name__ == "__main__":
    main()
