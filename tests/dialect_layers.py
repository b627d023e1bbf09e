"""Keras 3 twin of the dialect harness's custom layer (``tests/dialect_cases.py``, ``ScaleShift``): the same
two weights ``scale`` and ``shift`` of the input's last size, created in ``build`` in that order, and the
same arithmetic (``x * scale + shift``).  Usable as ``gruconv ... --custom-objects tests/dialect_layers.py``.

The tf_keras original's ``get_config`` is the full one (name, trainable, dtype and its own argument); the
``nameless_custom`` dialect rewrites the saved config to its own argument alone, as a user layer whose
``get_config()`` returned ``{"init_scale": ...}`` wrote it.  This twin takes either.
"""

import keras


class ScaleShift(keras.layers.Layer):
    def __init__(self, init_scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.init_scale = init_scale

    def build(self, input_shape):
        n = input_shape[-1]
        self.scale = self.add_weight(shape=(n,), name="scale",
                                     initializer=keras.initializers.Constant(self.init_scale))
        self.shift = self.add_weight(shape=(n,), name="shift", initializer="zeros")

    def call(self, x):
        return x * self.scale + self.shift

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return dict(super().get_config(), init_scale=self.init_scale)
