"""The workbench's widgets: state diffs, the call stepper, the review card."""

from .calls import CallDetail, CallList, VerdictBar
from .diff import DiffView, diff_text
from .footer import KeyFooter
from .nav import SYNTHETIC, NavBar
from .picker import Picker
from .review import ReviewCard

__all__ = ["CallDetail", "CallList", "DiffView", "KeyFooter", "NavBar", "Picker", "ReviewCard",
           "SYNTHETIC", "VerdictBar", "diff_text"]
