"""Effect-aware scoring on top of the replay core: the rules and their registry, the
question detector, destructive boundaries, per-run scoring, what a score was made with, and
the paired statistics."""

__all__ = ["batch", "decoders", "detector", "result", "rules", "score", "settings", "stats"]
