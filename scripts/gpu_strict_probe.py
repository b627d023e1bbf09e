"""Why does the Keras-on-torch "strict fp32" GPU path differ from real cuDNN by ~1e-5 on the trained
fixtures (issue 19's GPU run, 2026-11-27) when torch's own cuDNN call matched it bit for bit on the big
model?  Runs one trained TF1 stack through torch.nn.GRU/LSTM on CUDA under each way of asking for
strict fp32, against float64 on the CPU and against gruconv's ctypes cuDNN reference.
Usage (GPU machine): python3 scripts/gpu_strict_probe.py fixtures/trained/gru2.tf1 ...
"""
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.simplefilter("ignore")
import gruconv.torch as gt  # noqa: E402


def flags():
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    return dict(cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
                rnn_fp32_precision=getattr(rnn, "fp32_precision", None),
                cudnn_fp32_precision=getattr(torch.backends.cudnn, "fp32_precision", None),
                matmul_fp32_precision=getattr(torch.backends.cuda.matmul, "fp32_precision", None))


for src in sys.argv[1:]:
    out = Path(tempfile.mkdtemp()) / "m.safetensors"
    subprocess.run([sys.executable, "-m", "gruconv", "convert", src, str(out)], check=True, capture_output=True)
    for name, mod in gt.load(out).items():
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (100, 2, mod.input_size)).astype("float32")  # time-major
        m64 = mod.double()
        with torch.no_grad():
            y64 = m64(torch.from_numpy(x.transpose(1, 0, 2)).double())[0].numpy()
        mod = mod.float()
        rows = []
        for label, setup in [
            ("default", lambda: None),
            ("legacy flags allow_tf32=False", lambda: (setattr(torch.backends.cudnn, "allow_tf32", False),
                                                       setattr(torch.backends.cuda.matmul, "allow_tf32", False))),
            ("new api rnn/matmul ieee", lambda: (setattr(torch.backends.cudnn.rnn, "fp32_precision", "ieee"),
                                                 setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"))),
            ("new api cudnn ieee too", lambda: setattr(torch.backends.cudnn, "fp32_precision", "ieee")),
            ("+ cudnn.deterministic", lambda: setattr(torch.backends.cudnn, "deterministic", True)),
            ("+ packed input, full lengths", "packed"),
            ("+ batch 1 (no padding question)", "batch1"),
            ("cudnn disabled", lambda: setattr(torch.backends.cudnn, "enabled", False)),
        ]:
            try:
                g = mod.to("cuda")
                g.flatten_parameters()
                xb = torch.from_numpy(x.transpose(1, 0, 2)).cuda()
                with torch.no_grad():
                    if setup == "packed":
                        packed = torch.nn.utils.rnn.pack_padded_sequence(xb, [x.shape[0]] * x.shape[1],
                                                                         batch_first=True)
                        y = torch.nn.utils.rnn.pad_packed_sequence(g(packed)[0], batch_first=True)[0].cpu().numpy()
                    elif setup == "batch1":
                        y = np.concatenate([g(xb[b:b + 1])[0].cpu().numpy() for b in range(xb.shape[0])])
                    else:
                        setup()
                        y = g(xb)[0].cpu().numpy()
                rows.append((label, float(np.abs(y - y64).max()), flags()))
            except Exception as e:  # noqa: BLE001 - a probe: say what failed
                rows.append((label, f"{type(e).__name__}: {str(e).splitlines()[0][:150]}", flags()))
        torch.backends.cudnn.enabled = True
        print(f"{src} {name} ({type(mod).__name__} {mod.input_size}->{mod.hidden_size} x{mod.num_layers}"
              f"{' bi' if mod.bidirectional else ''}), T=100 B=2, max |y - float64|:")
        for label, err, fl in rows:
            print(f"  {label:32} {err if isinstance(err, str) else f'{err:.3e}'}   {fl}")
