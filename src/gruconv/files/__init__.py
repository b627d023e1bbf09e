"""Untrusted input and atomic output, with no format knowledge: :mod:`.inputs` is the one place a
user's file is opened, :mod:`.hdf5` reads HDF5 through every guard, :mod:`.zips` reads a ``.keras`` zip
through every guard, :mod:`.outputs` places files (temporary beside the target, then renamed)."""
