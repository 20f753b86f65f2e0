"""``careful generate`` and ``careful cost``."""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from pathlib import Path

import typer
from rich.table import Table

from careful_cli.common import (
    DEFAULT_BOUNDARY,
    EXIT_PROBLEMS,
    EXIT_UNUSABLE,
    Boundary,
    console,
    err,
    fail,
    literal,
    print_input_problems,
    progress_bar,
)
from careful_engine.core import bfcl
from careful_engine.generation.spend import OUTCOMES, requests_sent

EXIT_STOPPED = EXIT_PROBLEMS  # stopped early, resumable


app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`


@app.command()
def generate(
    model: str = typer.Option(..., "--model", "-m", help="A bfcl-eval registry name, e.g. "
                              "'Qwen/Qwen3-8B' or 'claude-haiku-4-5-20251001-FC'."),
    run: str = typer.Option(..., "--run", help="Run name: results go to <runs-dir>/NAME/."),
    condition: str = typer.Option("standard", "--condition", "-c",
                                  help="standard, hints (effect hints in the docs) or confirm "
                                  "(the confirmation-aware scripted user)."),
    categories: list[str] = typer.Option(None, "--categories", help="Multi-turn categories "
                                         "(base, miss_func, miss_param, long_context, all; "
                                         "comma-separated or repeated). Default all."),
    backend: str = typer.Option(None, "--backend", help="vllm or anthropic (default: from the "
                                "model's registered handler)."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Folder holding runs."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N conversations of each "
                              "category (smoke runs)."),
    ids: list[str] = typer.Option(None, "--ids", help="Only these conversation ids "
                                  "(comma-separated or repeated; their categories are run, "
                                  "--categories and --limit are ignored)."),
    threads: int = typer.Option(None, "--threads", help="Conversations in parallel (default "
                                "1 for anthropic, 16 for vllm)."),
    boundary: Boundary = DEFAULT_BOUNDARY,
    declarations: Path = typer.Option(None, "--declarations", help="Effect declarations for "
                                      "the hints (default declarations/effects.json)."),
    script: str = typer.Option("paper", "--script", help="Scripted user: paper, or one of "
                               "the stricter scripts of §7: withhold-failure-report, "
                               "withhold-failure, named-only."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="On resume, run again the "
                                      "conversations recorded as inference errors."),
    include_input_log: bool = typer.Option(False, "--include-input-log",
                                           help="Log every prompt (large files)."),
    exclude_state_log: bool = typer.Option(False, "--exclude-state-log",
                                           help="Do not log simulator states."),
    temperature: float = typer.Option(0.001, "--temperature", help="vllm: sampling "
                                      "temperature (bfcl's default)."),
    endpoint: str = typer.Option(None, "--endpoint", help="vllm: an existing OpenAI-compatible "
                                 "endpoint (http://host:port/v1) instead of starting vllm."),
    served_model_name: str = typer.Option(None, "--served-model-name", help="vllm: the model "
                                          "name the endpoint serves."),
    tokenizer: str = typer.Option("auto", "--tokenizer", help="vllm: hf (transformers, as "
                                  "bfcl), server (the endpoint's /tokenize) or auto."),
    max_model_len: int = typer.Option(65536, "--max-model-len", help="vllm: context length "
                                      "cap (min with the model's)."),
    port: int = typer.Option(None, "--port", min=1, max=65535, help="vllm: port for vllm serve (default bfcl's "
                             "1053, or LOCAL_SERVER_PORT)."),
    num_gpus: int = typer.Option(1, "--num-gpus", help="GPUs vLLM shards the model over "
                                 "(tensor parallel size; vllm only)."),
    gpu_memory_utilization: float = typer.Option(
        0.9, "--gpu-memory-utilization", help="Share of each GPU's memory vLLM may take "
        "(vllm only)."),
    local_model_path: str = typer.Option(None, "--local-model-path", help="vllm: weights "
                                         "folder instead of the Hugging Face id."),
    ready_timeout: float = typer.Option(1800.0, "--ready-timeout", help="vllm: seconds to "
                                        "wait for the server."),
    budget: float = typer.Option(None, "--budget", help="anthropic: hard budget in US dollars "
                                 "for the run folder (required for API runs)."),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="anthropic: output limit per "
                                   "request."),
    api_model: str = typer.Option(None, "--api-model", help="anthropic: model id to send "
                                  "(default the registry's)."),
    base_url: str = typer.Option(None, "--base-url", help="anthropic: API base URL (default "
                                 "ANTHROPIC_BASE_URL or the public API)."),
    prices: Path = typer.Option(None, "--prices", help="Price table (default "
                                "careful_engine/data/prices.json)."),
    max_attempts: int = typer.Option(8, "--max-attempts", help="Attempts per request "
                                     "(429, 529, 5xx, timeouts, lost connections, malformed "
                                     "answers); a refused connection stops at once."),
    max_wait: float = typer.Option(60.0, "--max-wait", help="Cap on one wait between "
                                   "attempts, seconds (retry-after honoured up to it)."),
    request_timeout: float = typer.Option(None, "--request-timeout", help="Total deadline "
                                          "of one request attempt, seconds, whatever the "
                                          "endpoint sends (default 600, or "
                                          "CAREFUL_REQUEST_TIMEOUT)."),
    connect_timeout: float = typer.Option(None, "--connect-timeout", help="Seconds to open a "
                                          "connection (default 10, or "
                                          "CAREFUL_CONNECT_TIMEOUT)."),
    max_response_bytes: int = typer.Option(None, "--max-response-bytes", help="Bytes one "
                                           "answer may have (default 16 MiB, or "
                                           "CAREFUL_MAX_RESPONSE_BYTES)."),
) -> None:
    """Generate a BFCL multi-turn run headlessly, resumably, in bfcl's result layout.

    Writes <runs-dir>/NAME/<model>/multi_turn/BFCL_v4_<category>_result.json (one line per
    finished conversation, fsynced) and careful_run.json (the manifest). Running the same
    command again resumes: conversations already written are skipped. `bfcl evaluate` and
    `careful score` read the result files unchanged.

    Every request attempt is bounded: connect timeout, a total deadline and a size cap
    (--connect-timeout, --request-timeout, --max-response-bytes); a refused connection stops
    the run at once as "endpoint unavailable". Model calls run on the engine's executor,
    never through eval.

    Exit code: 0 every selected conversation written; 1 stopped early (budget, API
    unavailable, interrupted), resumable; 2 bad input, or the run failed: the endpoint
    failed every attempt and nothing was written.
    """
    from careful_engine.core.bounded_http import Limits, check_endpoints
    from careful_engine.generation import GenerationError, RunOptions, StopRun, results
    from careful_engine.generation import generate as run_gen
    from careful_engine.generation.dataset import parse_categories, parse_ids
    from careful_engine.generation.retry import RetryPolicy
    from careful_engine.generation.runner import (
        BACKENDS,
        DEFAULT_THREADS,
        Condition,
        default_backend,
    )
    from careful_engine.protocol import SCRIPTS

    if script not in SCRIPTS:
        raise typer.BadParameter(f"{script!r}; choose one of {', '.join(SCRIPTS)}",
                                 param_hint="--script")
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise fail(f"--budget must be a finite positive number of US dollars, not {budget}")
    if not (max_wait >= 0 and math.isfinite(max_wait)) or max_attempts < 1:
        raise fail("--max-attempts must be at least 1 and --max-wait a finite number >= 0")
    try:
        limits = Limits.from_env(connect_timeout, request_timeout, max_response_bytes)
    except ValueError as e:
        raise fail(str(e)) from None
    try:
        check_endpoints(base_url=base_url, endpoint=endpoint, local_server=True)
    except ValueError as e:
        raise fail(str(e)) from None
    policy = RetryPolicy(max_attempts=max_attempts, max_wait=max_wait)
    try:
        run_dir = results.run_folder(runs_dir, run)
    except GenerationError as e:
        raise fail(str(e)) from None
    entry = bfcl.registry().get(model)
    if entry is None:
        near = sorted(k for k in bfcl.registry()
                      if model.lower().replace("-fc", "") in k.lower())[:5]
        hint = (f"; did you mean {', '.join(near)}?" if near else
                "; name a registry key, such as claude-sonnet-4-5-20250929-FC or "
                "Qwen/Qwen3-8B-FC (bfcl-eval's model_config.py lists them)")
        raise fail(f"{model!r} is not in bfcl-eval {bfcl.BFCL_VERSION}'s model registry{hint}")
    backend = backend or default_backend(entry.handler_class)
    if backend not in BACKENDS:
        raise typer.BadParameter(f"{backend!r}; choose vllm or anthropic",
                                 param_hint="--backend")
    try:
        cats = parse_categories(categories)
        id_list = parse_ids(ids) or None
    except GenerationError as e:
        raise fail(str(e)) from None
    folder = results.model_dir(run_dir, model)
    options = RunOptions(
        model=model, run_dir=run_dir, backend=backend, condition=condition, categories=cats,
        ids=id_list, limit=limit, boundary=boundary, declarations=declarations, script=script,
        threads=threads or DEFAULT_THREADS[backend],
        include_input_log=include_input_log, exclude_state_log=exclude_state_log,
        retry_errors=retry_errors,
    )
    guard = None
    server: contextlib.AbstractContextManager = contextlib.nullcontext()
    try:
        Condition(options)  # boundary, declarations, condition: fail before any server starts
    except ValueError as e:
        raise fail(str(e)) from None
    try:
        if backend == "anthropic":
            from careful_engine.generation.anthropic_backend import prepare

            handler, guard = prepare(options, folder, budget=budget, max_tokens=max_tokens,
                                     api_model=api_model, base_url=base_url, prices=prices,
                                     policy=policy, limits=limits)
        else:
            from careful_engine.generation.vllm_backend import prepare as prepare_vllm

            prepared = prepare_vllm(options, folder, temperature=temperature, endpoint=endpoint,
                                    served=served_model_name, tokenizer=tokenizer,
                                    max_model_len=max_model_len, port=port, num_gpus=num_gpus,
                                    gpu_memory_utilization=gpu_memory_utilization,
                                    local_model_path=local_model_path,
                                    ready_timeout=ready_timeout, policy=policy, limits=limits)
            handler, server = prepared.handler, prepared.server
            err.print("starting vllm serve ..." if endpoint is None else f"using {endpoint}",
                      markup=False)
        with server, progress_bar() as progress:
            if backend == "vllm":
                options.settings.update(prepared.attach())
            task = progress.add_task(f"{model} {condition}", total=None)

            def started(pending: int, already: int) -> None:
                progress.update(task, total=pending)
                if already:
                    err.print(f"resuming: {already} conversation(s) already written",
                              markup=False)

            def advanced(entry_id: str) -> None:
                spent = f" ${guard.spent:.2f}/{guard.budget:.2f}" if guard else ""
                progress.update(task, advance=1,
                                description=f"{model} {condition}{spent} {entry_id}")

            report = run_gen(options, handler, guard=guard, on_start=started,
                             on_entry=advanced)
    except GenerationError as e:
        raise fail(str(e)) from None
    except StopRun as e:  # before the run started (attaching to the endpoint)
        raise fail(f"{type(e).__name__}: {e}") from None
    except KeyboardInterrupt:
        err.print("interrupted: run the same command again to resume", style="yellow")
        raise typer.Exit(EXIT_STOPPED) from None
    _report(report)
    if report.status == "failed":
        raise typer.Exit(EXIT_UNUSABLE)
    if report.status != "complete":
        raise typer.Exit(EXIT_STOPPED)


def _report(report) -> None:
    m = report.manifest
    tokens = m.get("tokens", {})
    lines = [f"[bold]{literal(m['model'])}[/] {literal(m['condition'])}: {report.status}, "
             f"{report.generated} generated, {report.already} already written, "
             f"{report.left} left"]
    if tokens:
        # (what the result files log: the responses written, not every request sent)
        lines.append(f"tokens logged: {tokens.get('requests', 0):,} model responses, "
                     f"{tokens.get('prompt', 0):,} prompt ({tokens.get('cache_read', 0):,} "
                     f"read from cache), {tokens.get('output', 0):,} output")
    answers = m.get("user_answers") or {}
    if m.get("condition") == "confirm":
        lines.append("scripted user: " + " / ".join(f"{answers.get(k, 0)} {k}"
                                                    for k in ("yes", "no", "restate")))
    spend = m.get("spend")
    if spend:
        budget = spend.get("budget_usd")
        lines.append(f"spend: ${spend['conservative_usd']:.4f} conservative "
                     f"(${spend['list_usd']:.4f} at list prices)"
                     + (f" of ${budget:.2f}" if budget is not None else "")
                     + requests_text(spend.get("requests")))
    if m.get("inference_errors"):
        lines.append(f"[yellow]{m['inference_errors']} conversation(s) recorded as inference "
                     "errors[/]")
    for note in report.notes:
        lines.append(f"[yellow]{literal(note)}[/]")
    if report.stop_reason:
        lines.append(f"[yellow]{report.status}: {literal(report.stop_reason)}[/]")
    if report.status != "complete":
        lines.append("run the same command again to resume")
    lines.append(f"results and careful_run.json in [bold]{literal(report.folder)}[/]")
    for line in lines:
        console.print(line)


def requests_text(requests: dict[str, int] | None) -> str:
    """`` over N requests sent (a answered, ...)`` from a ledger's requests by outcome."""
    if not requests:
        return ""
    sent = requests_sent(requests)
    parts = [f"{requests.get(k, 0):,} {k}" for k in OUTCOMES if requests.get(k)]
    return (f" over {sent:,} request{'s' if sent != 1 else ''} sent"
            + (f" ({', '.join(parts)})" if parts else ""))


def _usd(x: float) -> str:
    return f"{x:,.2f}" if x >= 1 else f"{x:.4f}"


@app.command()
def cost(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR",
                                   help="A run folder (or any folder of result files)."),
    prices: Path = typer.Option(None, "--prices", help="Price table (default "
                                "careful_engine/data/prices.json)."),
    as_models: list[str] = typer.Option(None, "--as", help="Estimate the same volume on these "
                                        "models (names in the price table; default all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Price a logged run and estimate what the same volume would cost on other models.

    List prices bill cache reads and writes as the API does (the logged split, or BFCL's
    caching markers simulated when the run logged none); the conservative column bills cache
    reads at the full input price, as the spend guard does.
    """
    from careful_engine.generation import GenerationError
    from careful_engine.generation.cost import estimates, folder_volumes
    from careful_engine.generation.spend import conservative_cost, list_cost, load_prices

    if not run_dir.exists():
        raise fail(f"{run_dir} does not exist")
    problems: list = []
    try:
        table = load_prices(prices)
        folders = folder_volumes(run_dir, problems)
        if not folders:
            raise GenerationError(f"no multi-turn result files under {run_dir}")
        out = []
        for fv, label in zip(folders, _labels(folders), strict=True):
            own = table.find(fv.priced_as() or "")
            v = None if fv.not_priced() else fv.for_pricing
            item = {
                "folder": str(fv.folder), "model": fv.model, "label": label,
                "conversations": fv.conversations, "priced_conversations": fv.counted,
                "not_priced": fv.not_priced(), "coverage": fv.coverage(),
                "cache_split": "logged" if fv.cache_logged else "simulated",
                "volume": v.to_json() if v else None,
                "priced_as": own.model if own else None,
                "list_usd": list_cost(v, own) if own and v else None,
                "conservative_usd": conservative_cost(v, own) if own and v else None,
                "ledger": dict(fv.ledger) or None,
                "ledger_usd": ({"conservative": fv.ledger_usd[0], "list": fv.ledger_usd[1]}
                               if fv.ledger_usd else None),
                "estimates": [{"model": e.model.model, "display": e.model.display,
                               "fictional": e.model.fictional,
                               "list_usd": e.list_usd if v else None,
                               "conservative_usd": e.conservative_usd if v else None}
                              for e in estimates(fv, table, as_models or None)],
            }
            out.append(item)
    except GenerationError as e:
        raise fail(str(e)) from None
    if as_json:
        console.print_json(json.dumps(out))
    else:
        _print_costs(out)
    if problems:  # what was left out of the volume
        print_input_problems(problems, run_dir)
        raise typer.Exit(EXIT_PROBLEMS)


def _labels(folders: list) -> list[str]:
    """Each model folder's name, or where two folders share one, its entry label as the
    leaderboard labels entries (by run folder) with the model folder's name."""
    from careful_engine.analysis.leaderboard import label_entries

    names = Counter(fv.model for fv in folders)
    labels = label_entries([(fv.run, fv.model) for fv in folders])
    return [fv.model if names[fv.model] == 1 else
            lab if lab.endswith(f"/{fv.model}") else f"{lab}/{fv.model}"
            for fv, lab in zip(folders, labels, strict=True)]


def _print_costs(out: list[dict]) -> None:
    """cost's tables: per model folder its volume, its own price and the same volume on
    other models; n/a with the reason where nothing could be priced."""
    for item in out:
        v = item["volume"]
        head = f"[bold]{literal(item['label'])}[/] ({item['conversations']:,} conversations"
        if v is None:
            console.print(f"{head}): n/a, not priced: {item['not_priced']}")
        else:
            head += f"; {item['coverage']}" if item["coverage"] else ""
            n = v["requests"]
            console.print(f"{head}): {n:,} request{'s' if n != 1 else ''}, {v['prompt']:,} prompt "
                          f"tokens ({v['cache_read']:,} cache reads, {v['cache_write']:,} "
                          f"writes, {item['cache_split']}), {v['output']:,} output")
        if item["priced_as"] and v is not None:
            console.print(f"  at {literal(item['priced_as'])} prices: "
                          f"${_usd(item['list_usd'])} list, "
                          f"${_usd(item['conservative_usd'])} conservative")
        if item["ledger_usd"]:
            console.print(f"  spend ledger: ${item['ledger_usd']['conservative']:.4f} "
                          f"conservative{requests_text(item['ledger'])}")
        if v is None:
            continue
        t = Table(title="same volume on other models", title_justify="left")
        for col in ("model", "list $", "conservative $"):
            t.add_column(col, justify="left" if col == "model" else "right")
        for e in item["estimates"]:
            name = literal(e["display"]) + (" *" if e["fictional"] else "")
            t.add_row(name, _usd(e["list_usd"]), _usd(e["conservative_usd"]))
        console.print(t)
    if any(e["fictional"] for item in out for e in item["estimates"]):
        console.print("* the paper's model names; placeholder prices (see prices.json)")
