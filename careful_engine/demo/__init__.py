"""The embedded default data: the reference run written as a model's output, and the
SYNTHETIC flawed run beside it, and what `careful demo` says of the two."""

__all__ = ["flaws", "reference", "summary"]
