"""The version of cog_pl, in one place: a leaf that imports nothing, so any module can read it without importing the
package face (``setup.cfg`` reads it as ``attr: cog_pl.version.__version__``; ``cog_pl.__version__`` re-exports it)."""

__version__ = "0.1.0"
