"""Write a legacy tf_keras HDF5 model with one layer outside the streaming writer's vocabulary
(``UnitNormalization``, which Keras 3 has) after a CuDNNGRU, for ``tests/writers/test_streaming_writer.py``'s
fallback tests.  Written by tf_keras's own legacy HDF5 writer.  Usage:
``python make_outside_vocabulary_model.py OUT.h5``.
"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tf_keras as K
import tensorflow as tf

x = K.layers.Input((5, 3), name="x")
h = tf.compat.v1.keras.layers.CuDNNGRU(4, return_sequences=True, name="gru")(x)
y = K.layers.UnitNormalization(name="unit")(h)
K.Model(x, y, name="m").save(sys.argv[1])
