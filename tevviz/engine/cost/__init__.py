"""What a round costs and what it is expected to yield: the cost models and --budget auto's plans."""
