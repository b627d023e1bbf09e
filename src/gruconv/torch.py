"""Public name of the PyTorch target's API (docs/outputs.md, docs/targets.md: ``gruconv.torch.load``); the code lives in
:mod:`gruconv.writers.torch.run`."""

from .writers.torch.run import load, run_torch

__all__ = ["load", "run_torch"]
