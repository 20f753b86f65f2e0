"""Errors raised by the annotation engine (all are ``ValueError``s carrying a clear message)."""

from __future__ import annotations


class AnnotationError(ValueError):
    """Bad input or a request the store refuses."""


class RoundError(AnnotationError):
    """A round does not exist, exists already, or is in the wrong state."""


class LabelError(AnnotationError):
    """A label breaks a rule (unknown function, missing reason, submitted set)."""


class BlindnessError(AnnotationError, PermissionError):
    """A request would show someone labels (or agreement) that blindness hides."""


class RowError(AnnotationError):
    """A row of the database that careful never writes (changed by something else)."""
