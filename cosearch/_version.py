"""The package version (one place: ``cosearch.__version__`` and every saved file read it)."""

__version__ = "0.3.0.dev0"
