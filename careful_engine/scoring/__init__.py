"""Effect-aware scoring on top of the replay core: the rules and their registry, the blame of
failed conversations, the question detector, destructive boundaries, per-run scoring, what a
score was made with, and the paired statistics."""

__all__ = ["batch", "blame", "decoders", "detector", "outputs", "result", "rules", "score",
           "settings", "signature", "stats", "tallies"]
