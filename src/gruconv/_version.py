"""The package version, in a module of its own so that ``cli`` and ``batch.records`` import it without
importing back from the package ``__init__`` (tests/test_structure.py ``test_no_upward_import``)."""

__version__ = "0.1.0"
