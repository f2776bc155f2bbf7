"""The ``vhdf5`` command line: ``vhdf5 demo``, ``vhdf5 log FILE``."""

from ._main import cli, main

__all__ = ["cli", "main"]
