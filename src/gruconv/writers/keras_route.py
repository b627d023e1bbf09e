"""The one switch between the two routes of the Keras writers (``keras``, ``keras-weights``): the streamed
writer (:mod:`gruconv.keras3.archive`, no Keras imported) first; the Keras-built route when the streaming
writer refuses a graph and Keras 3 with a backend is installed, announced in one warning line.  Not a
writer itself (it is not in :data:`gruconv.writers.WRITERS`)."""

from __future__ import annotations

from ..errors import UnsupportedError


def keras_installed() -> bool:
    """Keras 3 and one backend it can use are importable (found, not imported: the same backends
    :func:`gruconv.keras3.runtime.pick_backend` picks from)."""
    import importlib.util

    def found(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install counts as none
            return False

    return found("keras") and any(found(m) for m in ("tensorflow", "torch", "jax"))


def fallback_note(reason: str) -> str:
    """The one warning line of a fallback to the Keras-built route."""
    return f"streaming writer: {reason}; written through Keras instead (built, saved and loaded back)"


#: What :func:`streamed` returns when the Keras-built route must write the graph instead.
BUILD = object()


def streamed(graph, warnings: list, write):
    """``write()``'s result; or, if the streaming writer refuses the graph (:class:`UnsupportedError`)
    and the graph has a model config and Keras is installed, the warning line and :data:`BUILD`;
    else the refusal stands.  Only the streamed writing is inside the ``try``: a later check's
    refusal is never taken for the streaming writer's."""
    try:
        return write()
    except UnsupportedError as e:
        if graph.model_config is None or not keras_installed():
            raise
        warnings.append(fallback_note(e.message))
        return BUILD


def built(graph):
    """The converted model of a Keras graph in memory, for ``verify`` without a converted file: the
    streamed writer's own config and weights (a ``.weights.h5`` in a private directory, loaded into
    :func:`gruconv.keras3.runtime.from_config` of the config it wrote), so ``verify in.h5`` checks what
    ``convert in.h5 out.keras`` writes (issue 28: it checked the Keras-built route while convert wrote
    the streamed one).  Where the streaming writer refuses the graph, the Keras-built route, as
    ``convert`` does.  Returns ``(model, {layer: NaN/Inf count})``."""
    import tempfile
    from pathlib import Path

    from ..keras3 import archive, runtime

    with tempfile.TemporaryDirectory(prefix="gruconv-") as td:
        target, info, nonfinite = Path(td) / "converted.weights.h5", {}, {}
        wrote = streamed(graph, [], lambda: archive.write_keras_h5_doc(graph, target, weights_only=True,
                                                                       nonfinite=nonfinite, info=info))
        if wrote is BUILD:
            return graph.build_model()
        model = runtime.from_config(info["config"])
        runtime.load_weights(model, target)
        return model, nonfinite
