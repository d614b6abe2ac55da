"""Where a decode starts, a decoding session round by round, its streams, the sizing of its rounds, and their costs."""
