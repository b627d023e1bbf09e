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
