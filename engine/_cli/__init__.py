"""The ``taketurns`` command line: ``eval``, ``envs`` (the catalog), ``report``, ``serve``."""
