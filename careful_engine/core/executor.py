"""The executor bfcl's inference loops call during generation: the engine's, never ``eval``.

bfcl's loops run each decoded call through ``execute_multi_turn_func_call``
(``multi_turn_utils.py:13-100``), which rewrites the call string and passes it to ``eval``.
:func:`execute_multi_turn_func_call` here has the same signature and returns the same pair
(result strings, ``{class name: instance}``), but each call goes through
:meth:`careful_engine.core.environment.Environment.execute`: parsed with ``ast`` into a method of an
instance the conversation owns with literal arguments, and run; nothing is evaluated. Results
and states are those of bfcl's executor (``tests/test_executor_exact.py``). The loops are
compiled with this function in place of bfcl's (:mod:`careful_engine.protocol.patch`).

Instances live per conversation, keyed as bfcl keys them (model name, ``_eval`` for an eval
run, entry id); like bfcl's, they persist across the turns of a conversation, and
:func:`free` drops them when the conversation ends.
"""

from __future__ import annotations

import threading
from typing import Any

from careful_engine.core.environment import Environment

_lock = threading.Lock()
_environments: dict[tuple[str, str], Environment] = {}
calls_executed = 0  # calls run through this executor in this process (tests read it)


def _environment(initial_config: dict, involved_classes: list, model_name: str,
                 test_entry_id: str, long_context: bool) -> Environment:
    key = (model_name, test_entry_id)
    with _lock:
        env = _environments.get(key)
    if env is None:
        # a conversation runs in one thread; creating outside the lock keeps threads apart
        env = Environment(initial_config, involved_classes, long_context=long_context,
                          name_prefix=model_name, entry_id=test_entry_id, snapshots=False)
        with _lock:
            env = _environments.setdefault(key, env)
    return env


def execute_multi_turn_func_call(
    func_call_list: list[str],
    initial_config: dict,
    involved_classes: list,
    model_name: str,
    test_entry_id: str,
    long_context: bool = False,
    is_evaL_run: bool = False,  # noqa: N803 - bfcl's parameter name
) -> tuple[list[str], dict[str, Any]]:
    """bfcl's executor's contract, with the engine's parser and dispatch instead of ``eval``."""
    global calls_executed
    if is_evaL_run:
        model_name += "_eval"
    env = _environment(initial_config, involved_classes, model_name, test_entry_id,
                       long_context)
    results: list[str] = []
    for call in func_call_list:
        if not isinstance(call, str):  # bfcl's rewrite (re.sub) raises on a non-string
            raise TypeError(f"expected string or bytes-like object, got "
                            f"{type(call).__name__!r}")
        results.append(env.execute(call).result)
        with _lock:
            calls_executed += 1
    return results, dict(env.instances)


def free(model_name: str, test_entry_id: str) -> None:
    """Drop a finished conversation's instances (under both of bfcl's names for it)."""
    with _lock:
        _environments.pop((model_name, test_entry_id), None)
        _environments.pop((model_name + "_eval", test_entry_id), None)


def live() -> int:
    """Conversations whose instances are held."""
    with _lock:
        return len(_environments)
