"""The drafter kinds, each wiring its own drafting, loading and training into the registry (draft/drafters.py loads
these by name)."""
