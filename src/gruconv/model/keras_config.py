"""Pure Keras 2 / tf.keras config walking, shared by the readers and the Keras 3 side without either
importing the other: the accessors of a layer config (class name, config object, inner layers, name) and
the class sets they are read against.  No I/O, no framework: JSON in, values out.

Format facts (Keras 2 ``keras/engine/sequential.py`` / ``functional.py`` ``get_config``; tf_keras the
same): a layer entry is ``{"class_name": ..., "config": {...}}``; a container (``Sequential``, ``Model``,
``Functional``) lists its layers in ``config["layers"]``, or, for Keras 2.0-2.2.2's ``Sequential``, as
``config`` itself.
"""

from __future__ import annotations

from typing import Optional

from .keras_layout import CELL_OF_CUDNN_CLASS, KERAS3_CLASS

#: The Keras 2 / tf.keras / tf_keras cuDNN-only layer classes and the cell each holds, and per cell the
#: Keras 3 layer class it becomes (``model/keras_layout.py``'s tables under this module's names).
CUDNN_CLASSES = CELL_OF_CUDNN_CLASS
TARGET_CLASS = KERAS3_CLASS
CONTAINER_CLASSES = {"Sequential", "Model", "Functional"}


def class_name_of(cfg) -> Optional[str]:
    name = cfg.get("class_name") if isinstance(cfg, dict) else None
    return name if isinstance(name, str) else None


def config_of(cfg) -> dict:
    """A layer's ``config`` object, or ``{}`` when it is missing or not an object."""
    c = cfg.get("config") if isinstance(cfg, dict) else None
    return c if isinstance(c, dict) else {}


def layers_of(cfg: dict) -> list:
    inner = cfg.get("config")
    if isinstance(inner, list):  # Keras 2.0–2.2.2 Sequential: config is the layer list
        return inner
    if isinstance(inner, dict) and isinstance(inner.get("layers"), list):
        return inner["layers"]
    return []


def name_of(cfg: dict) -> str:
    c = cfg.get("config")
    name = (c.get("name") if isinstance(c, dict) else None) or cfg.get("name")
    return str(name) if name is not None else "?"


#: Layers that compute the identity at inference (``training=False``: Keras's ``Dropout``, noise and
#: regularization layers return their input), so a value crosses them unchanged.
IDENTITY_AT_INFERENCE = frozenset({"Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout",
                                   "AlphaDropout", "ActivityRegularization"})


def makes_mask(class_name: Optional[str], config: dict) -> bool:
    """Whether a layer of ``class_name`` with ``config`` attaches a Keras mask to its output: ``Masking``,
    and ``Embedding`` with ``mask_zero`` (Keras 2 and 3 ``compute_mask``)."""
    return class_name == "Masking" or (class_name == "Embedding" and bool(config.get("mask_zero")))
