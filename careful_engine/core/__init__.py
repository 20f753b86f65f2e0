"""The replay core: bfcl-eval behind one package (:mod:`careful_engine.core.bfcl`), call
parsing without evaluation, owned simulator environments, snapshots and diffs, decoding,
replay with bfcl's verdict, bounded work, result-file reading, bounded reads and safe writes,
bounded HTTP requests, the user's cache folder, the reference cache and the worker pool. Nothing here imports
scoring, analysis, presentation or a front end."""

import warnings

# Text from files (a model's calls, logged values) is only parsed with ``ast``, never compiled
# to code, but Python's tokenizer warns on stderr about odd literals in it ("1if", "0x1for",
# "\\{"), naming the pseudo-file "<string>" or "<unknown>": warnings about hostile text, not
# about code, so they are silenced process-wide for those pseudo-files (bfcl's decoders too).
for _category in (SyntaxWarning, DeprecationWarning):
    warnings.filterwarnings("ignore", category=_category, module=r"<(string|unknown)>\Z")

__all__ = [
    "anthropic_answers", "bfcl", "bounded_http", "budget", "calls", "checker", "decode", "doctor", "environment", "executor",
    "figures", "fs_capture", "install_key", "json_values", "literal_expr", "parallel", "perf",
    "process", "purity", "refcache", "replay", "runs", "safe_read", "safe_text", "safe_write",
    "state", "trajectory", "user_cache",
]
