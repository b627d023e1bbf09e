"""The Keras 3 side: configs and files written without Keras (:mod:`.config`, :mod:`.defaults`,
:mod:`.archive`, :mod:`.portable`), and :mod:`.runtime`, the only module that imports Keras."""
