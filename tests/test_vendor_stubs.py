"""Decoders built without their vendor SDKs (careful_engine/core/bfcl/vendor_stubs.py): nothing
of the SDK is imported to decode, every registry key decodes exactly as with the real SDK
imported, and the real SDK is what later code gets.

Each check runs in a fresh interpreter: whether an SDK is loaded is a property of the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from careful_engine.core.bfcl import vendor_stubs

ROOT = Path(__file__).resolve().parents[1]
XLAM = "Salesforce/Llama-xLAM-2-8b-fc-r"  # its handler module imports openai and requests


def _python(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env={**os.environ, **env}, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_a_decoder_is_built_without_its_sdk_and_later_code_gets_the_real_one() -> None:
    code = f"""
import sys
from careful_engine.core import bfcl
from careful_engine.core.decode import decode_step
h = bfcl.handler({XLAM!r})
print(sorted(m for m in ("openai", "requests") if m in sys.modules))
print(decode_step(h, '[{{"name": "cd", "arguments": {{"folder": "docs"}}}}]').calls)
print(any(type(m).__name__ == "_StubModule" for m in sys.modules.values()))
import openai
mod = sys.modules[type(h).__mro__[1].__module__]
client = mod.OpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
print(type(client) is openai.OpenAI, isinstance(client, mod.OpenAI), openai.__file__ is not None)
"""
    lines = _python(code).splitlines()
    assert lines[0] == "[]"  # neither SDK loaded to build and use the decoder
    assert lines[1] == "[\"cd(folder='docs')\"]"
    assert lines[2] == "False"  # no stub left behind for a later import
    assert lines[3] == "True True True"  # the handler module's name now reaches the real SDK


_PARITY = """
import json, sys
sys.path.insert(0, ".")
from careful_engine.core import bfcl
from careful_engine.core.decode import decode_step
from tests.decoder_formats import handler_format, named_calls, render
turns = [t for c in bfcl.conversations("multi_turn_base")[:4] for t in c.ground_truth if t]
junk = ["", "hello", "[", "{}", "[cd(folder='a')]", '{"name": "cd", "arguments": {}}', ["x"]]
out = {}
for key in bfcl.registry():
    h = bfcl.handler(key)
    fmts = [f for f in (handler_format(key), "python_list", "fc_object", "tool_call_json") if f]
    steps = [s for t in turns for f in fmts for s in [render(f, named_calls(t))] if s is not None]
    out[key] = [[st.outcome.name, st.calls, st.error]
                for st in (decode_step(h, s) for s in steps + junk)]
print(json.dumps({"loaded": sorted(m for m in ("openai", "anthropic", "cohere", "mistralai",
                                                 "boto3", "writerai") if m in sys.modules),
                  "decoded": out}, default=str))
"""


def test_every_registry_key_decodes_the_same_with_and_without_the_sdks() -> None:
    stubbed = json.loads(_python(_PARITY))
    real = json.loads(_python(_PARITY, CAREFUL_VENDOR_STUBS="off"))
    assert stubbed["loaded"] == []  # decoding all 175 keys never needed an SDK
    assert "openai" in real["loaded"]  # the comparison is with the SDKs really imported
    assert stubbed["decoded"].keys() == real["decoded"].keys()
    differ = [k for k in real["decoded"] if stubbed["decoded"][k] != real["decoded"][k]]
    assert not differ, differ
    assert sum(len(v) for v in real["decoded"].values()) > 175 * 20


def test_an_sdk_that_is_not_installed_gets_no_stub(monkeypatch) -> None:
    monkeypatch.setattr(vendor_stubs, "VENDOR_MODULES", ("careful_no_such_sdk", "json"))
    assert vendor_stubs._installed_unloaded() == frozenset()  # absent, or already loaded
