"""Effect declarations inferred by state diff (paper §4).

* :mod:`.observe` — observations from the reference trajectories and logged runs;
* :mod:`.probes` — synthetic probes from sampled states;
* :mod:`.signals` — the three consequence signals;
* :mod:`.infer` — read/write, hidden-only, idempotence, footprint, signal counts;
* :mod:`.declarations` — ``declarations/effects.json`` and Table 2;
* :mod:`.boundary` — destructive boundaries, versioned, with who decided and why;
* :mod:`.review` — the annotators' review sheet (Markdown and CSV);
* :mod:`.audit` — the reference-trajectory counts of §3;
* :mod:`.mcp` — MCP tool definitions with annotations.
"""

__all__ = ["audit", "boundary", "declarations", "infer", "mcp", "observe", "probes", "review",
           "signals"]
