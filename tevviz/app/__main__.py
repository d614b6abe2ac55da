"""`python -m tevviz.app` serves the app on the embedded pair (as `tevviz app` does)."""

from . import launch

launch()
