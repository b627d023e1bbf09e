"""Which layer class names are Keras's own, so that every other one can be told apart as a user's
custom class.

Why a list: the streamed writer (:mod:`gruconv.keras3.config`) imports no Keras, yet must decide, for a
class outside its vocabulary, between a *Keras built-in it lacks* (the Keras-built route handles it, or
refuses it as before) and a *user's custom class* (carried over as Keras 3 serializes a custom object;
the user supplies the class at load time).  A name is custom when it is in none of the sets below.

* :data:`KERAS3_LAYERS`: every ``keras.layers`` export that is a ``Layer`` subclass, Keras 3.15.1;
* :data:`LEGACY_LAYERS`: the Layer classes tf_keras 2.21 exports (``tf_keras.layers``, its
  ``experimental``/``preprocessing`` namespaces, ``tf.compat.v1.keras.layers``) that Keras 3 lacks, the
  model classes, and the names tf_keras writes for the layers it makes itself from TensorFlow ops in a
  functional model (``TFOpLambda``, ``SlicingOpLambda``, ``TensorFlowOpLayer``,
  ``tf_keras/src/layers/core/tf_op_layer.py``) plus Keras 1/2 names (``Merge``, ``Highway``,
  ``MaxoutDense``).

* :data:`KERAS3_FUNCTIONS`, :data:`LEGACY_FUNCTIONS`: the rest of those namespaces, entries that are not
  Layer classes (``deserialize``, ``serialize``, ``Input``, ``add``, ...).  A config naming one as its
  class is not a user's class either: carried over as a custom layer, its advice
  ``custom_objects={"deserialize": ...}`` invited the one object that would deserialize whatever layer
  its config holds (a ``Lambda``'s marshalled code, a ``TFSMLayer`` loading a SavedModel from outside
  the input).  Such a name is refused instead (:func:`gruconv.keras3.config.outside_layer`).

``tests/keras3/test_custom_layers.py`` compares every set with what the installed Keras 3 and tf_keras export.
No framework import here.
"""

from __future__ import annotations

KERAS_RELEASE = "3.15.1"

KERAS3_LAYERS = frozenset("""
Activation ActivityRegularization AdaptiveAveragePooling1D AdaptiveAveragePooling2D AdaptiveAveragePooling3D
AdaptiveMaxPooling1D AdaptiveMaxPooling2D AdaptiveMaxPooling3D Add AdditiveAttention AlphaDropout Attention AugMix
AutoContrast Average AveragePooling1D AveragePooling2D AveragePooling3D AvgPool1D AvgPool2D AvgPool3D
BatchNormalization Bidirectional CategoryEncoding CenterCrop Concatenate
ContrastLimitedAdaptiveHistogramEqualization Conv1D Conv1DTranspose Conv2D Conv2DTranspose Conv3D Conv3DTranspose
ConvLSTM1D ConvLSTM2D ConvLSTM3D Convolution1D Convolution1DTranspose Convolution2D Convolution2DTranspose
Convolution3D Convolution3DTranspose Cropping1D Cropping2D Cropping3D CutMix Dense DepthwiseConv1D DepthwiseConv2D
Discretization Dot Dropout ELU EinsumDense Embedding Equalization Flatten FlaxLayer GRU GRUCell GaussianDropout
GaussianNoise GlobalAveragePooling1D GlobalAveragePooling2D GlobalAveragePooling3D GlobalAvgPool1D GlobalAvgPool2D
GlobalAvgPool3D GlobalMaxPool1D GlobalMaxPool2D GlobalMaxPool3D GlobalMaxPooling1D GlobalMaxPooling2D
GlobalMaxPooling3D GroupNormalization GroupQueryAttention HashedCrossing Hashing Identity InputLayer IntegerLookup
JaxLayer LSTM LSTMCell Lambda Layer LayerNormalization LeakyReLU Masking MaxNumBoundingBoxes MaxPool1D MaxPool2D
MaxPool3D MaxPooling1D MaxPooling2D MaxPooling3D Maximum MelSpectrogram Minimum MixUp MultiHeadAttention Multiply
Normalization PReLU Permute Pipeline RMSNormalization RNN RandAugment RandomBrightness RandomColorDegeneration
RandomColorJitter RandomContrast RandomCrop RandomElasticTransform RandomErasing RandomFlip RandomGaussianBlur
RandomGrayscale RandomHue RandomInvert RandomPerspective RandomPosterization RandomRotation RandomSaturation
RandomSharpness RandomShear RandomTranslation RandomZoom ReLU RepeatVector Rescaling Reshape Resizing
ReversibleEmbedding STFTSpectrogram SeparableConv1D SeparableConv2D SeparableConvolution1D SeparableConvolution2D
SimpleRNN SimpleRNNCell Softmax Solarization SpatialDropout1D SpatialDropout2D SpatialDropout3D SpectralNormalization
StackedRNNCells StringLookup Subtract TFSMLayer TextVectorization TimeDistributed TorchModuleWrapper UnitNormalization
UpSampling1D UpSampling2D UpSampling3D Wrapper ZeroPadding1D ZeroPadding2D ZeroPadding3D
""".split())

LEGACY_LAYERS = frozenset("""
AbstractRNNCell CuDNNGRU CuDNNLSTM DenseFeatures DynamicEmbedding DynamicLookup Functional LocallyConnected1D
LocallyConnected2D Model PreprocessingLayer RandomFourierFeatures RandomHeight RandomWidth Sequential
SyncBatchNormalization ThresholdedReLU
TFOpLambda SlicingOpLambda TensorFlowOpLayer Merge Highway MaxoutDense
""".split())

#: ``keras.layers`` entries that are not Layer classes, Keras 3.15.1 (functions and ``InputSpec``).
KERAS3_FUNCTIONS = frozenset("""
Input InputSpec add average concatenate deserialize dot maximum minimum multiply serialize subtract
""".split())

#: The same of tf_keras 2.21's layer namespaces (those :data:`LEGACY_LAYERS` lists), beyond Keras 3's.
LEGACY_FUNCTIONS = frozenset("""
disable_v2_dtype_behavior enable_v2_dtype_behavior experimental preprocessing
""".split())


def is_keras_function(class_name) -> bool:
    """True for a class name that is an entry of Keras's (or tf_keras's) layer namespace but not a Layer
    class: a function such as ``deserialize``, which no user's layer is (a ``Package>`` prefix names a
    registered class of the user's, so it is not one)."""
    return isinstance(class_name, str) and class_name in KERAS3_FUNCTIONS | LEGACY_FUNCTIONS


def bare_name(class_name: str) -> str:
    """A class name without the ``Package>`` prefix ``register_keras_serializable`` gives it."""
    return str(class_name).split(">")[-1]


def is_custom(class_name) -> bool:
    """True for a layer class that is neither Keras 3's nor tf_keras's own: a user's class."""
    if not isinstance(class_name, str) or not class_name:
        return False
    name = bare_name(class_name)
    if not name.isidentifier():  # no Python class has that name: not a class a user could supply
        return False
    if ">" in class_name:  # registered with register_keras_serializable: a user's class by definition
        return True
    return name not in KERAS3_LAYERS and name not in LEGACY_LAYERS and not is_keras_function(name)


def custom_classes(model_config) -> dict:
    """``{class name: [layer path, ...]}`` of a model config's custom layers: classes that are neither Keras 3's
    nor tf_keras's own (:func:`is_custom`)."""
    from ..model.keras_config import class_name_of, walk_layers

    found: dict = {}
    if isinstance(model_config, dict):
        for layer, rpath, _top, _wrapper in walk_layers(model_config):
            cls = class_name_of(layer)
            if is_custom(cls):
                found.setdefault(bare_name(cls), []).append(rpath)
    return found
