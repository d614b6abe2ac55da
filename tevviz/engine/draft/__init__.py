"""Drafting: the drafter seam and its registry, the tree builders, and the drafters' own mechanisms (block drafters,
EAGLE-3 heads, the written-out Llama-family step)."""
