"""The one switch between the two routes of the Keras writers (``keras``, ``keras-weights``): the streamed
writer (:mod:`gruconv.keras3.archive`, no Keras imported) first, with the notes both give for custom layer
classes; the Keras-built route when the streaming
writer refuses a graph and Keras 3 with a backend is installed, announced in one warning line.  Not a
writer itself (it is not in :data:`gruconv.writers.WRITERS`)."""

from __future__ import annotations

from typing import Optional

from ..errors import UnsupportedError, UsageError


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


class Fallback:
    """What :func:`streamed` returns when the Keras-built route must write the graph instead: the streaming
    writer's reason, said again if the Keras-built route refuses too (:func:`with_keras`)."""

    def __init__(self, reason: str):
        self.reason = reason


def streamed(graph, warnings: list, write):
    """``write()``'s result; or, if the streaming writer refuses the graph (:class:`UnsupportedError`)
    and the graph has a model config and Keras is installed, the warning line and a :class:`Fallback`;
    else the refusal stands.  Only the streamed writing is inside the ``try``: a later check's
    refusal is never taken for the streaming writer's."""
    try:
        return write()
    except UnsupportedError as e:
        if graph.model_config is None or not keras_installed():
            raise
        warnings.append(fallback_note(e.message))
        return Fallback(e.message)


def with_keras(fallback: Fallback, build):
    """``build()`` (the Keras-built route after ``fallback``); its refusal names both routes' reasons, the
    Keras-built route's first (the user's file failed both, and the first reason is often the telling one)."""
    from ..errors import GruconvError

    try:
        return build()
    except GruconvError as e:
        if fallback.reason in e.message:
            raise
        raise type(e)(f"{e.message} (the streaming writer had refused it first: {fallback.reason})",
                      path=e.path) from None


def built(graph, *, info: Optional[dict] = None, notes: Optional[list] = None):
    """The converted model of a Keras graph in memory, built by Keras from THE translation
    (:func:`gruconv.keras3.config.translate`, the dict the streamed writer writes; a Keras built-in
    class outside its vocabulary carried for Keras to build, ``outside=CARRY``):
    ``model_from_json`` of it with zero initializers (:func:`gruconv.keras3.runtime.from_config`), then
    the weights of the streamed writer's own array stream (:func:`gruconv.keras3.archive.weight_arrays`
    over the graph's store; against the model's layers, or the streamed writer's plan for a tf_keras ``.keras``)
    assigned in place (:func:`gruconv.keras3.build.assign`).  No legacy ``.h5`` intermediate, no
    legacy loader.  Used by the Keras-built fallback of both Keras writers and by ``verify`` without a
    converted file, so ``verify in.h5`` and ``verify in.h5 out.keras`` check the same model.
    Returns ``(model, {layer: NaN/Inf count})``; ``info["config"]`` receives the translated dict, ``notes``
    the lines the streamed writer gives too (Keras 2 semantics kept: :mod:`gruconv.keras3.dialects`)."""
    from ..errors import InputError, about
    from ..keras3 import archive, build, dialects, runtime
    from ..keras3 import config as keras3_config

    if graph.model_config is None:
        raise UsageError("a weights-only file needs --config ARCH.json (the model's to_json()) to become "
                         "a Keras model", path=graph.path)
    with about(graph.path, (UnsupportedError, InputError)):
        archive.check_rnn_inputs(graph, notes)
        config = keras3_config.translate(graph.model_config, outside=keras3_config.CARRY)
        if notes is not None:
            notes.extend(dialects.rescale_notes(keras3_config.saveable_plan(config)[1]))
        if info is not None:
            info["config"] = config
        model = runtime.from_config(config)
        nonfinite: dict = {}
        tops, plan_tops = _TOPS[graph.layout](graph, config, model)
        arrays = dialects.rescaled(archive.weight_arrays(graph, config, tops, nonfinite), tops, plan_tops)
        build.assign(model, tops, arrays, source=graph.path)
    return model, nonfinite


def _legacy_tops(graph, config: dict, model) -> tuple:
    """A legacy store names weights per top-level layer: the built model's layers, and the streamed writer's plan
    (what :func:`gruconv.keras3.dialects.rescaled` keys its rescaling on)."""
    from ..keras3 import build
    from ..keras3 import config as keras3_config

    return build.layer_tops(model), keras3_config.saveable_plan(config)[1]


def _v3_tops(graph, config: dict, model) -> tuple:
    """A tf_keras ``.keras`` store names weights by the streamed writer's object paths: its plan, custom layers'
    slots filled in (:func:`gruconv.keras3.archive.custom_slots`)."""
    from ..keras3 import archive
    from ..keras3 import config as keras3_config

    groups, tops = keras3_config.saveable_plan(config)
    archive.custom_slots(graph, config, groups, tops)
    return tops, tops


#: ``graph.layout`` (:class:`gruconv.model.canonical.KerasGraph`) -> ``(graph, config, model) -> (tops the weight
#: stream is read against, tops the rescaling is keyed on)``.
_TOPS = {"legacy": _legacy_tops, "v3": _v3_tops}


def custom_notes(config: dict, warnings: list, *, weights_only: bool = False) -> dict:
    """One warning per custom layer class carried over (:func:`gruconv.keras3.config.custom_layers`),
    saying what the user must supply to load the output; returns ``{class_name: [layer names]}``."""
    from ..keras3.config import custom_layers

    found = custom_layers(config)
    for cls, names in found.items():
        objects = f'custom_objects={{"{cls}": <your Keras 3 class>}}'
        how = (f"load into the converted architecture built with your class (keras.models.model_from_json(config, "
               f"{objects}), then model.load_weights(path))" if weights_only
               else f"load with keras.saving.load_model(path, {objects})")
        warnings.append(f"custom layer class {cls} ({', '.join(str(n) for n in names)}) carried over as it is: "
                        f"config unchanged, its stored weights in their order; {how} (gruconv never runs code "
                        "from a model file)")
    return found


def load_custom(options, custom: dict, warnings: list):
    """``--check-load`` of an output with custom layers: the classes of ``--custom-objects``
    (:func:`gruconv.keras3.runtime.custom_objects_from`), or, without it, None and a warning that Keras was
    not asked to load the output (it cannot rebuild a class it was not given)."""
    path = getattr(options, "custom_objects", None)
    if not custom:
        if path is not None:
            warnings.append(f"--custom-objects {path}: the model has no custom layers; the file was not imported")
        return {}
    if path is None:
        warnings.append(f"--check-load: the output was not loaded with Keras (custom layer class(es) "
                        f"{', '.join(custom)} need --custom-objects FILE.py); the archive's own self-check "
                        "passed (members, config, every weight's shape, dtype and digest)")
        return None
    from ..keras3 import runtime as keras3

    return keras3.custom_objects_from(path, custom)
