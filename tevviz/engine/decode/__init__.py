"""A decoding session round by round, its streams, the sizing policy of its rounds, and what its forwards cost."""
