"""The writers: one module per output format, listed in :mod:`gruconv.writers.registry` (the registry
and the :class:`~gruconv.writers.registry.Writer` Protocol), planned by :mod:`gruconv.writers.planning`.

A new writer is one module and one line in :data:`~gruconv.writers.registry.WRITERS`.  This package
re-exports the registry's names (``from gruconv import writers; writers.module("keras")``).
"""

from .registry import (COMMON_OPTIONS, DIRECTORY_KINDS, KINDS, OPTIONAL, REST, WRITERS, WRITES, Writer, beside, by_kind,
                       claimed_by, gpu_probe, hook, load, model_runner, module, offering, optional, output_format,
                       output_name, profiles, stack_runners, suffixes, targets)

__all__ = ["COMMON_OPTIONS", "DIRECTORY_KINDS", "KINDS", "OPTIONAL", "REST", "WRITERS", "WRITES", "Writer", "beside", "by_kind",
           "claimed_by", "gpu_probe", "hook", "load", "model_runner", "module", "offering", "optional", "output_format", "output_name",
           "profiles", "stack_runners",
           "suffixes", "targets"]
