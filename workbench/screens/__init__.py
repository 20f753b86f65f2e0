"""The workbench's screens, one per job (Textual modes), plus the stepper and dialogs."""

from .agreement import AgreementScreen
from .conversation import ConversationScreen
from .help import HelpScreen
from .home import HomeScreen
from .label import LabelScreen
from .leaderboard import LeaderboardScreen
from .replay import ReplayScreen

__all__ = ["AgreementScreen", "ConversationScreen", "HelpScreen", "HomeScreen", "LabelScreen",
           "LeaderboardScreen", "ReplayScreen"]
