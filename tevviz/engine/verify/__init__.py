"""The verifiers, and several of them compared on the same trees."""
