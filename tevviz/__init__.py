"""tevviz: an interactive visual debugger for draft trees in speculative decoding."""

__version__ = "0.1.0"
