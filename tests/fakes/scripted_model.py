"""A scripted model: predetermined responses per conversation, over either wire format.

A script maps a conversation id to the model's responses in the order it is queried
(``Say`` text, ``Calls`` function calls, ``Raw`` text sent verbatim). The k-th query of a
conversation gets the k-th response, where k is the number of assistant messages already in
the request, so the script is independent of process restarts and thread interleaving; past
its end the model says ``"Done."``. The conversation is recognised by its first user message.

Responders: :func:`anthropic_responder` for :class:`tests.fakes.anthropic_server.
FakeMessagesServer` (tool_use blocks, usage with cache fields) and
:func:`completions_responder` for :class:`tests.fakes.openai_server.FakeCompletionsServer`
(bfcl's Python call lists, or Qwen ``<tool_call>`` blocks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from careful_engine.core import bfcl
from tests.fakes.anthropic_server import Reply, message, usage


@dataclass(frozen=True)
class Say:
    text: str


@dataclass(frozen=True)
class Raw:
    text: str  # sent verbatim (e.g. undecodable output)


@dataclass(frozen=True)
class Calls:
    calls: tuple[tuple[str, dict], ...]

    def __init__(self, *calls: tuple[str, dict]) -> None:
        object.__setattr__(self, "calls", tuple(calls))


Step = Say | Raw | Calls
DONE = Say("Done.")


@dataclass
class Script:
    steps: dict[str, list[Step]]
    first_messages: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for entry_id in self.steps:
            conv = bfcl.conversation(entry_id)
            text = "\n".join(m["content"] for m in conv.question[0] if m["role"] == "user")
            other = self.first_messages.get(text.strip())
            if other is not None:
                raise ValueError(f"{entry_id} and {other} start alike; script them apart")
            self.first_messages[text.strip()] = entry_id

    def identify(self, text: str) -> str:
        """The conversation whose first user message ``text`` starts with / equals."""
        text = text.strip()
        if text in self.first_messages:
            return self.first_messages[text]
        for first, entry_id in self.first_messages.items():
            if first in text:
                return entry_id
        raise KeyError(f"no scripted conversation starts with {text[:80]!r}")

    def step(self, entry_id: str, k: int) -> Step:
        steps = self.steps[entry_id]
        return steps[k] if k < len(steps) else DONE


# ---------------------------------------------------------------- Anthropic Messages


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict)
                         and b.get("type") == "text")
    return ""


def anthropic_responder(script: Script,
                        usage_of: Callable[[dict], dict] | None = None) -> Callable:
    """Replies to Messages requests from the script (``usage_of(body)`` sets the usage)."""

    def respond(req) -> Reply:
        body = req.body
        msgs = body["messages"]
        entry_id = script.identify(_text_of(msgs[0]["content"]))
        k = sum(1 for m in msgs if m["role"] == "assistant")
        step = script.step(entry_id, k)
        u = usage_of(body) if usage_of else usage(input_tokens=100, output_tokens=10)
        if isinstance(step, Calls):
            content = [{"type": "tool_use", "id": f"toolu_{entry_id}_{k}_{i}", "name": name,
                        "input": args} for i, (name, args) in enumerate(step.calls)]
            return Reply(200, message(content, stop_reason="tool_use", usage_=u))
        return Reply(200, message([{"type": "text", "text": step.text}], usage_=u))

    return respond


# ---------------------------------------------------------------- completions (prompting)

_USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S)


def python_calls(calls: tuple[tuple[str, dict], ...]) -> str:
    """bfcl's prompting format: ``[f(a=1), g(b='x')]``."""
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})"
                           for n, a in calls) + "]"


def qwen_tool_calls(calls: tuple[tuple[str, dict], ...]) -> str:
    """Qwen's FC format: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks."""
    return "\n".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>"
                     for n, a in calls)


def completions_responder(script: Script, fmt: Callable = python_calls) -> Callable:
    """Replies to ChatML prompts (bfcl's Qwen handlers) from the script."""

    def respond(req) -> str:
        prompt = req.body["prompt"]
        first = _USER.search(prompt)
        entry_id = script.identify(first.group(1) if first else "")
        k = prompt.count("<|im_start|>assistant") - 1  # the last one is the generation prompt
        step = script.step(entry_id, k)
        if isinstance(step, Calls):
            return fmt(step.calls)
        return step.text

    return respond


# ---------------------------------------------------------------- a model that plays the reference


def _turn_texts(entry_id: str) -> list[str]:
    conv = bfcl.conversation(entry_id)
    return ["\n".join(m["content"] for m in turn if m.get("role") == "user").strip()
            for turn in conv.question]


def reference_step(entry_id: str, seen: list[str]) -> list[str] | None:
    """What a model playing the reference says next: the current turn's reference calls if it
    has not acted since the turn's question, else nothing (None: "Done.").

    ``seen`` lists the conversation's user texts and assistant markers (``"\\0assistant"``) in
    order, as the request carries them.
    """
    conv = bfcl.conversation(entry_id)
    texts = _turn_texts(entry_id)
    turn, since = -1, 0
    for item in seen:
        if item == "\0assistant":
            since += 1
        elif item and item in texts[turn + 1:]:
            turn, since = texts.index(item, turn + 1), 0
    if turn < 0 or since > 0 or not conv.ground_truth[turn]:
        return None
    return list(conv.ground_truth[turn])


def _kwargs(call: str) -> tuple[str, dict]:
    """A reference call string as a tool call: name and arguments by parameter name."""
    import ast

    node = ast.parse(call, mode="eval").body
    name = node.func.id
    args = tuple(ast.literal_eval(a) for a in node.args)
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return name, bfcl.bound_arguments(name, args, kwargs, partial=True) or kwargs


def reference_completions(entry_ids: list[str]) -> Callable:
    """Completions replies playing the reference, in bfcl's prompting format ``[f(a=1)]``."""
    script = Script({i: [] for i in entry_ids})

    def respond(req) -> str:
        prompt = req.body["prompt"]
        first = _USER.search(prompt)
        entry_id = script.identify(first.group(1) if first else "")
        seen = []
        for m in re.finditer(r"<\|im_start\|>(user|assistant)\n(.*?)(?:<\|im_end\|>|$)",
                             prompt, re.S):
            seen.append(m.group(2).strip() if m.group(1) == "user" else "\0assistant")
        seen = seen[:-1]  # the generation prompt
        calls = reference_step(entry_id, seen)
        return "Done." if calls is None else "[" + ", ".join(calls) + "]"

    return respond


def reference_messages(entry_ids: list[str]) -> Callable:
    """Messages replies playing the reference as ``tool_use`` blocks."""
    script = Script({i: [] for i in entry_ids})

    def respond(req) -> Reply:
        msgs = req.body["messages"]
        entry_id = script.identify(_text_of(msgs[0]["content"]))
        seen = [_text_of(m["content"]).strip() if m["role"] == "user" else "\0assistant"
                for m in msgs]
        calls = reference_step(entry_id, seen)
        u = usage(input_tokens=100, output_tokens=10)
        if calls is None:
            return Reply(200, message([{"type": "text", "text": "Done."}], usage_=u))
        content = []
        for i, call in enumerate(calls):
            name, args = _kwargs(call)
            content.append({"type": "tool_use", "id": f"toolu_{entry_id}_{len(msgs)}_{i}",
                            "name": name, "input": args})
        return Reply(200, message(content, stop_reason="tool_use", usage_=u))

    return respond
