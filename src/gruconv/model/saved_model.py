"""A SavedModel's member names and signature key, spelled once (names only: no I/O, no TensorFlow).

From TensorFlow's ``tensorflow/python/saved_model/constants.py`` (``SAVED_MODEL_FILENAME_PB``/``_PBTXT``,
``VARIABLES_DIRECTORY``, ``VARIABLES_FILENAME``, ``ASSETS_DIRECTORY``, ``EXTRA_ASSETS_DIRECTORY``) and
``signature_constants.py`` (``DEFAULT_SERVING_SIGNATURE_DEF_KEY``); tf_keras ``saving/legacy/saved_model/
constants.py`` (``SAVED_METADATA_PATH``).
"""

from __future__ import annotations

#: The graph file of a SavedModel directory, binary first, and whether each is the text format.
GRAPH_FILES = (("saved_model.pb", False), ("saved_model.pbtxt", True))
#: The graph file names alone: "is this directory a SavedModel".
SAVED_MODEL_FILES = tuple(name for name, _ in GRAPH_FILES)
#: The binary graph file a writer writes.
SAVED_MODEL_PB = GRAPH_FILES[0][0]
#: The variables bundle: ``variables/variables.index`` and its data shards.
VARIABLES = "variables"
VARIABLES_PREFIX = "variables/variables"
#: The directories a SavedModel's other files live in (carried byte for byte by a rewrite).
ASSETS = ("assets", "assets.extra")
#: tf.keras 2.x's metadata file (the model's architecture).
KERAS_METADATA = "keras_metadata.pb"
#: The signature served by default (and the one a frozen graph's conversion gets).
SIGNATURE = "serving_default"
