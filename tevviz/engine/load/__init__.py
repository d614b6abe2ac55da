"""Loading a target and a draft beside it, and the named pairs tevviz ships."""
