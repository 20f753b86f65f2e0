"""The embedded default data: the reference run written as a model's output, and the
SYNTHETIC flawed run beside it."""

__all__ = ["flaws", "reference"]
