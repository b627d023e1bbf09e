"""The Keras boundary: :mod:`gruconv.formats.keras3` is the only module that imports Keras.

Input formats are :mod:`gruconv.readers` (their registry); output formats are
:mod:`gruconv.writers`.
"""
