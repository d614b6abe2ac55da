"""Serving engines beside tevviz: their speculative-decoding statistics read into one record (acceptance.py)."""
