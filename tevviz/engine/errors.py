"""The one exception type that carries a message meant for the user."""


class TevvizError(ValueError):
    """Bad input or an unsupported model; the message says what and how to fix it."""
