"""The converted-side run ``verify`` is doing, as context state.

A leaf module of its own: the driver (:mod:`gruconv.verify`) sets it, the verdict code
(:mod:`.verdicts`) and the binding of the non-Keras targets' runners (:mod:`.runners`) read it; defined in the
package ``__init__`` it made ``verify`` -> ``graph`` -> ``verdicts`` -> ``verify`` an import cycle."""

from __future__ import annotations

import contextvars

#: ``(device label, math)`` of the converted-side run in progress.  A target that runs its stacks
#: itself (torch, onnx: :class:`gruconv.writers.runner.StackRunner`) is bound to its math by
#: :func:`gruconv.verify.runners.matching_runner`.
CURRENT_RUN = contextvars.ContextVar("gruconv_verify_run", default=("cpu", None))
