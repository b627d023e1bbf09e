"""Write a legacy tf_keras HDF5 model using most of the streaming writer's layer vocabulary (for
``tests/writers/test_streaming_writer.py``): LayerNormalization, GaussianNoise, ZeroPadding1D, Cropping1D, Conv1D with
an L2 regularizer and a MaxNorm constraint, MaxPooling1D, UpSampling1D, LeakyReLU, Add / Maximum / Average /
Minimum / Concatenate, Permute, Bidirectional(CuDNNGRU, merge_mode="sum"), SimpleRNN, PReLU, AveragePooling1D,
Flatten, Dense, Reshape, Softmax, RepeatVector, CuDNNLSTM, Dot, GaussianDropout, AlphaDropout; two inputs,
two outputs.  Written by tf_keras's own legacy HDF5 writer.  Usage: ``python make_vocabulary_model.py OUT.h5``.
"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tf_keras as K
import tensorflow as tf
L_GRU = tf.compat.v1.keras.layers.CuDNNGRU; L_LSTM = tf.compat.v1.keras.layers.CuDNNLSTM
L = K.layers
x = L.Input((12, 6), name="x")
y = L.Input((12, 6), name="y")
h = L.LayerNormalization()(x)
h = L.GaussianNoise(0.1)(h)
h = L.ZeroPadding1D(1)(h)
h = L.Cropping1D(1)(h)
h = L.Conv1D(6, 3, padding="same", kernel_regularizer=K.regularizers.L2(0.01), kernel_constraint=K.constraints.MaxNorm(2))(h)
h = L.MaxPooling1D(2)(h)
h = L.UpSampling1D(2)(h)
h = L.LeakyReLU()(h)
a = L.Add()([h, y]); m = L.Maximum()([h, y]); av = L.Average()([h, y]); mn = L.Minimum()([h, y])
h = L.Concatenate()([a, m, av, mn])
h = L.Permute((2, 1))(h); h = L.Permute((2, 1))(h)
h = L.Bidirectional(L_GRU(5, return_sequences=True), merge_mode="sum")(h)
s = L.SimpleRNN(4, return_sequences=True)(h)
h = L.PReLU()(s)
h = L.AveragePooling1D(2)(h)
h = L.Flatten()(h)
h = L.Dense(8, activation="elu")(h)
h = L.Reshape((2, 4))(h)
h = L.Softmax()(h)
h = L.Flatten()(h)
r = L.RepeatVector(3)(h)
h = L_LSTM(3)(r)
d = L.Dot(axes=1)([h, h])
out = L.AlphaDropout(0.1)(L.GaussianDropout(0.1)(L.Dense(2)(h)))
m = K.Model([x, y], [out, d])
m.save(sys.argv[1])
print("saved")
