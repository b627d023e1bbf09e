"""The Keras 3 side: configs and files written without Keras (:mod:`.config` -- the one Keras 2 -> Keras 3
translation, ``translate``, after the mends of :mod:`.legacy` --, :mod:`.defaults`, :mod:`.archive`,
:mod:`.portable`), :mod:`.build` (Keras models from a config and the archive's weight stream), and
:mod:`.runtime`, the only module that imports Keras."""
