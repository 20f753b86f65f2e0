"""The replay core: bfcl-eval behind one package (:mod:`careful_engine.core.bfcl`), call
parsing without evaluation, owned simulator environments, snapshots and diffs, decoding,
replay with bfcl's verdict, bounded work, result-file reading, bounded reads and safe writes,
bounded HTTP requests, the user's cache folder, the reference cache and the worker pool. Nothing here imports
scoring, analysis, presentation or a front end."""

__all__ = [
    "bfcl", "bounded_http", "budget", "calls", "checker", "decode", "doctor", "environment", "executor",
    "figures", "fs_capture", "install_key", "json_values", "literal_expr", "parallel", "perf",
    "process", "purity", "refcache", "replay", "runs", "safe_read", "safe_text", "safe_write",
    "state", "trajectory", "user_cache",
]
