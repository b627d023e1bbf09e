"""A Keras 3 port of textgenrnn's ``AttentionWeightedAverage`` (the tf_keras original is in
``fixtures/make_custom_layer_fixtures.py``): the same weight ``W (features, 1)``, created in ``build`` as
the original does, and the same arithmetic in ``keras.ops``.  Used by ``tests/keras3/test_custom_layers.py`` and
usable as ``gruconv ... --custom-objects tests/custom_layers.py``: a user's own Keras 3 class, imported only
when named."""

import keras
from keras import ops


class AttentionWeightedAverage(keras.layers.Layer):
    def __init__(self, return_attention=False, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.return_attention = return_attention

    def build(self, input_shape):
        self.W = self.add_weight(shape=(input_shape[2], 1), name=f"{self.name}_W", initializer="uniform")

    def call(self, x, mask=None):
        logits = ops.squeeze(ops.matmul(x, self.W), -1)
        ai = ops.exp(logits - ops.max(logits, axis=-1, keepdims=True))
        if mask is not None:
            ai = ai * ops.cast(mask, ai.dtype)
        att_weights = ai / (ops.sum(ai, axis=1, keepdims=True) + keras.backend.epsilon())
        result = ops.sum(x * ops.expand_dims(att_weights, -1), axis=1)
        return [result, att_weights] if self.return_attention else result

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        return dict(super().get_config(), return_attention=self.return_attention)
