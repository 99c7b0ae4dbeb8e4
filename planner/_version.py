"""plan3d's version, alone in a module of its own so that anything may import it without importing
the package's public functions."""

__version__ = "0.1.0"
