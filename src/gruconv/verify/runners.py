"""How ``verify`` picks the converted stack of a non-Keras target (torch, onnx) it drives: the writers hand
their stacks over as :class:`gruconv.writers.runner.StackRunner` (their ``runners`` verb), made for the CPU;
:func:`matching_runner` checks the one for a stack and binds it to the run ``verify`` is doing
(:data:`gruconv.verify.run.CURRENT_RUN`)."""

from __future__ import annotations

from .run import CURRENT_RUN


def matching_runner(runners: dict, stack, *, only: bool, path):
    """The runner of ``stack`` among ``runners`` (by its name; a file of one RNN serves the one stack
    of an input that has one), checked to have the stack's shape: a converted file of another model
    is one :class:`InputError`, never a torch/onnxruntime shape error."""
    from ..errors import InputError

    runner = runners.get(stack.name) or (None if stack.name else runners.get(f"{stack.shape.cell}_stack"))
    if runner is None and only and len(runners) == 1:
        runner = next(iter(runners.values()))
    if runner is None:
        raise InputError(f"holds no RNN named {stack.name!r} (it has {', '.join(map(repr, runners))})", path=path)
    a, b = runner.shape, stack.shape
    mine = (a.cell, a.input_size, a.units, a.num_layers, a.bidirectional)
    theirs = (b.cell, b.input_size, b.units, b.num_layers, b.bidirectional)
    if mine != theirs:
        what = lambda t: f"{t[0].upper()} input {t[1]}, units {t[2]}, {t[3]} layer(s), {'bi' if t[4] else 'uni'}"  # noqa: E731
        raise InputError(f"RNN {runner.name!r} is {what(mine)}; the original {stack.name!r} is {what(theirs)}: "
                         "not a conversion of this input", path=path)
    return runner.on(CURRENT_RUN.get()[1])  # None: CPU; "strict" / "default": the GPU run verify is doing
