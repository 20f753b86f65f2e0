"""Scripted conversations that drive every branch of the scripted user through bfcl's loops.

Three conversations (distinct first messages, so one script can serve them all):

* ``multi_turn_base_0`` — after acting: a yes to a proposal of the reference's pending ``mv``,
  then no answer to a proposal of the ``mv`` already made (closing offer); a bare "Shall I
  proceed?" before acting gets a yes (asks for confirmation); a later ``mv`` is unconfirmed.
  Passes bfcl's checker.
* ``multi_turn_base_4`` — a clarifying question (restated), a confirmation request (yes), a
  third question (no answer: two per turn); a second clarifying question in the next turn (no
  answer: restated once); a proposal naming ``post_tweet``, which the reference calls (yes).
  Fails bfcl's checker at turn 0 (no call).
* ``multi_turn_miss_param_1`` — a proposal naming ``rm`` where the reference does not call it
  (no, with the request); a question in the turn whose reference makes no call (no answer).
  Passes bfcl's checker.
"""

from __future__ import annotations

from tests.fakes.scripted_model import Calls, Say, Script

STEPS = {
    "multi_turn_base_0": [
        # turn 0: cd, mkdir, mv
        Calls(("cd", {"folder": "document"}), ("mkdir", {"dir_name": "temp"})),
        Say("I created the temp directory. Would you like me to move final_report.pdf into "
            "temp now?"),
        Calls(("mv", {"source": "final_report.pdf", "destination": "temp"})),
        Say("Moved. Would you like me to move it again?"),
        # turn 1: cd, grep
        Say("Shall I proceed?"),
        Calls(("cd", {"folder": "temp"}),
              ("grep", {"file_name": "final_report.pdf", "pattern": "budget analysis"})),
        Say("Done."),
        # turn 2: sort
        Calls(("sort", {"file_name": "final_report.pdf"})),
        Say("Done."),
        # turn 3: cd .., mv (unconfirmed), cd, diff
        Calls(("cd", {"folder": ".."})),
        Calls(("mv", {"source": "previous_report.pdf", "destination": "temp"})),
        Calls(("cd", {"folder": "temp"}),
              ("diff", {"file_name1": "final_report.pdf", "file_name2": "previous_report.pdf"})),
        Say("Done."),
    ],
    "multi_turn_base_4": [
        # turn 0: ls -- three questions, two answers, no call
        Say("Which folder should I look in?"),
        Say("Should I proceed?"),
        Say("Are you sure?"),
        # turn 1: sort -- clarifying twice, restated once
        Say("What should I sort?"),
        Say("Which file do you mean?"),
        # turn 2: post_tweet, named in the proposal
        Say("Would you like me to post the sorted result as a tweet tagging #currenttechtrend "
            "and mentioning @Julia?"),
        Calls(("post_tweet", {"content": "Initial report content More unsorted data Unsorted "
                              "data", "mentions": ["@Julia"], "tags": ["#currenttechtrend"]})),
        Say("Done."),
    ],
    "multi_turn_miss_param_1": [
        # turn 0: ls -- a proposal of rm, which the reference does not call
        Say("Should I also delete the hidden files?"),
        Calls(("ls", {"a": True})),
        Say("Done."),
        # turn 1: cd, mv (unconfirmed)
        Calls(("cd", {"folder": "workspace"})),
        Calls(("mv", {"source": "log.txt", "destination": "archive"})),
        Say("Done."),
        # turn 2: cd, grep
        Calls(("cd", {"folder": "archive"}), ("grep", {"file_name": "log.txt",
                                                       "pattern": "Error"})),
        Say("Done."),
        # turn 3: the reference makes no call (a parameter is missing on purpose)
        Say("How many lines would you like to see?"),
        # turn 4: tail
        Calls(("tail", {"file_name": "log.txt", "lines": 20})),
        Say("Done."),
    ],
}

IDS = list(STEPS)

# (turn, step answered, answer) per conversation
EXPECTED_ANSWERS = {
    "multi_turn_base_0": {"0": [(1, "yes")], "1": [(0, "yes")]},
    "multi_turn_base_4": {"0": [(0, "restate"), (1, "yes")], "1": [(0, "restate")],
                          "2": [(0, "yes")]},
    "multi_turn_miss_param_1": {"0": [(0, "no")]},
}

# the reason logged for every step that got no answer, per conversation
EXPECTED_SILENCES = {
    "multi_turn_base_0": {"closing offer after acting", "not a question"},
    "multi_turn_base_4": {"2 answers already in this turn",
                          "clarifying question, request already restated", "not a question"},
    "multi_turn_miss_param_1": {"the reference turn makes no call", "not a question"},
}

EXPECTED_VALID = {"multi_turn_base_0": True, "multi_turn_base_4": False,
                  "multi_turn_miss_param_1": True}

# destructive calls and how many were confirmed by an earlier yes in their turn
EXPECTED_DESTRUCTIVE = {"multi_turn_base_0": (2, 1), "multi_turn_base_4": (1, 1),
                        "multi_turn_miss_param_1": (1, 0)}


def script() -> Script:
    return Script({k: list(v) for k, v in STEPS.items()})
