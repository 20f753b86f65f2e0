"""A result entry's ``inference_log``, read defensively into turns, steps and logged states.

bfcl's inference loops (``base_handler.py``: FC ``:94-391``, prompting ``:393-682``) write a
list that alternates state snapshots and turns::

    [ [state_info per class],                      # after loading the scenario
      {"begin_of_turn_query": [messages],
       "step_0": [assistant, handler_log, tool, tool, ...], "step_1": [...], ...},
      [state_info per class],                      # at the end of that turn
      {...}, [...], ... ]

A step holds the raw model output (role ``assistant``), the decode outcome of the day (role
``handler_log`` with ``model_response_decoded`` or ``error``), and one ``tool`` message per
executed call, in call order: the results the model was shown. State snapshots hold the public
attributes of each stateful class after bfcl's ``make_json_serializable`` (values that are not
JSON, such as the file system's tree or a set, became their ``str()``).

Every shape problem is noted with where it is; what can be read is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from careful_engine.core.json_values import a_kind

FORCED_QUIT = "forced to quit"  # base_handler.py:325-331, "Model has been forced to quit ..."


@dataclass(slots=True)
class LoggedStep:
    """One model step as logged at generation time."""

    index: int
    raw: Any = None
    has_raw: bool = False
    decoded: list | None = None  # the day's decoded calls, when logged
    decode_error: str | None = None  # the day's decode failure message, when logged
    tools: list[str] = field(default_factory=list)  # results shown to the model, in order
    forced_quit: bool = False

    @property
    def decode_logged(self) -> bool:
        return self.decoded is not None or self.decode_error is not None


@dataclass
class LoggedTurn:
    index: int
    query: list[dict] | None  # begin_of_turn_query (None: not logged)
    steps: list[LoggedStep] = field(default_factory=list)


@dataclass
class InferenceLog:
    """What the model saw while the run was generated."""

    initial_state: dict[str, Any] | None = None  # class -> logged public attributes
    turns: list[LoggedTurn] = field(default_factory=list)
    end_states: list[dict[str, Any] | None] = field(default_factory=list)  # per turn
    problems: list[str] = field(default_factory=list)

    @property
    def forced_quit(self) -> bool:
        return bool(self.turns) and any(s.forced_quit for s in self.turns[-1].steps)

    def state_before(self, turn: int) -> dict[str, Any] | None:
        """The logged state at the start of ``turn`` (None when not logged)."""
        if turn == 0:
            return self.initial_state
        if 0 < turn <= len(self.end_states):
            return self.end_states[turn - 1]
        return None


def _state_list(item: list, where: str, problems: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, entry in enumerate(item):
        if not isinstance(entry, dict) or entry.get("role") != "state_info":
            problems.append(f"{where}[{k}] is not a state_info message")
            continue
        name, content = entry.get("class_name"), entry.get("content")
        if not isinstance(name, str) or not isinstance(content, dict):
            problems.append(f"{where}[{k}] has no class_name or no content object")
            continue
        out[name] = content
    return out


def _step(turn: int, index: int, messages: Any, problems: list[str]) -> LoggedStep:
    step = LoggedStep(index)
    where = f"inference_log turn {turn} step_{index}"
    if not isinstance(messages, list):
        problems.append(f"{where} is {a_kind(messages)}, not a list of messages")
        return step
    tools = step.tools
    for k, msg in enumerate(messages):
        role = msg.get("role") if type(msg) is dict else None
        if role == "tool":
            content = msg.get("content")
            if type(content) is str:
                tools.append(content)
                continue
            problems.append(f"{where}[{k}] tool result is {a_kind(content)}, "
                            "not a string")
            tools.append(str(content))
        elif role == "handler_log":
            content = msg.get("content")
            if isinstance(content, str) and FORCED_QUIT in content:
                step.forced_quit = True
            if step.decoded is not None or step.decode_error is not None:
                continue
            if "model_response_decoded" in msg:
                decoded = msg["model_response_decoded"]
                if isinstance(decoded, list):
                    step.decoded = decoded
                else:
                    problems.append(f"{where}[{k}] model_response_decoded is not a list")
            elif "error" in msg:
                step.decode_error = str(msg["error"])
        elif role == "assistant":
            if not step.has_raw:
                step.raw, step.has_raw = msg.get("content"), True
        elif role is None:
            problems.append(f"{where}[{k}] is not a message with a role")
    return step


def _turn(index: int, item: dict, problems: list[str]) -> LoggedTurn:
    where = f"inference_log turn {index}"
    query = item.get("begin_of_turn_query")
    if query is None:
        problems.append(f"{where} has no begin_of_turn_query")
    elif not isinstance(query, list) or not all(isinstance(m, dict) for m in query):
        problems.append(f"{where} begin_of_turn_query is not a list of messages")
        query = None
    turn = LoggedTurn(index, query)
    numbered: list[tuple[int, Any]] = []
    for key, value in item.items():
        if key == "begin_of_turn_query":
            continue
        suffix = key[5:] if isinstance(key, str) and key.startswith("step_") else ""
        if suffix.isascii() and suffix.isdigit() and len(suffix) <= 6:  # not '²', not 5000 digits
            numbered.append((int(suffix), value))
        else:
            problems.append(f"{where} has an unexpected key {str(key)[:60]!r}")
    numbered.sort(key=lambda x: x[0])
    if [n for n, _ in numbered] != list(range(len(numbered))):
        problems.append(f"{where} steps are not numbered 0..{len(numbered) - 1}")
    turn.steps = [_step(index, n, v, problems) for n, v in numbered]
    return turn


def parse_log(raw: Any) -> InferenceLog | None:
    """Read an ``inference_log``; None when there is none. Problems are kept on the result."""
    if raw is None:
        return None
    log = InferenceLog()
    if not isinstance(raw, list):
        log.problems.append(f"inference_log is {a_kind(raw)}, not a list")
        return log
    for k, item in enumerate(raw):
        if isinstance(item, list):
            state = _state_list(item, f"inference_log[{k}]", log.problems)
            if not log.turns and log.initial_state is None:
                log.initial_state = state
            elif log.turns and len(log.end_states) < len(log.turns):
                log.end_states.extend([None] * (len(log.turns) - 1 - len(log.end_states)))
                log.end_states.append(state)
            else:
                log.problems.append(f"inference_log[{k}] is a second state list in a row")
        elif isinstance(item, dict):
            log.turns.append(_turn(len(log.turns), item, log.problems))
        else:
            log.problems.append(f"inference_log[{k}] is {a_kind(item)}, "
                                "neither a turn nor a state list")
    return log
