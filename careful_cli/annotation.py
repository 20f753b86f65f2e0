"""``careful round|label|agree|adjudicate|labels|annotate-llm``: blind annotation, headless.

The commands are thin: every rule (blindness, reasons, what a session may read) is enforced
by :mod:`careful_engine.annotation`; its store, sessions, release and llm modules (sqlite-utils
with pandas, anthropic) are imported on demand, when a command runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
import typer
from rich.table import Table
from rich.text import Text
from typer.exceptions import TyperException

from careful_cli.common import (
    EXIT_PROBLEMS,
    EXIT_UNUSABLE,
    Annotators,
    console,
    err,
    internal_error,
)
from careful_engine.annotation.adjudication import TIES, name_problem, parse_policy
from careful_engine.annotation.agreement import AgreementReport
from careful_engine.annotation.errors import AnnotationError, LabelError
from careful_engine.annotation.names import check_name
from careful_engine.annotation.signals import load_inputs
from careful_engine.core import bfcl
from careful_engine.core.safe_read import same_file
from careful_engine.core.safe_text import literal, visible
from careful_engine.core.safe_write import UnsafeWrite
from careful_engine.effects import boundary as boundary_mod
from careful_engine.effects.boundary import BoundaryError
from careful_engine.present.tables import Name, NameTable

if TYPE_CHECKING:
    from careful_engine.annotation.sessions import AnnotatorSession
    from careful_engine.annotation.store import Store

app = typer.Typer()  # this module's commands; careful_cli/__init__.py adds them to `careful`
round_app = typer.Typer(
    help="Labelling rounds: create one, follow its progress, submit a label set.",
    no_args_is_help=True,
)
labels_app = typer.Typer(
    help="Label sets in the release format (one JSON file per annotator): export, import.",
    no_args_is_help=True,
)

app.add_typer(round_app, name="round")
app.add_typer(labels_app, name="labels")

DB_HELP = ("Annotation database. Default: $CAREFUL_DB, else annotations/careful.db in the "
           "repository.")
ROUND_HELP = "The labelling round."
NAME_HELP = ("Names: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit; "
             "no spaces or control characters.")


DB_OPTION = typer.Option(None, "--db", help=DB_HELP, envvar="CAREFUL_DB", show_envvar=False)


def _user() -> str:
    from careful_engine.annotation.sessions import current_account

    return current_account()


def _stamp(value: object) -> str:
    """A time (or hash) from the database, its first 19 characters, shown literally."""
    return literal(str(value)[:19]) if value else "–"


@contextmanager
def _guard() -> Iterator[None]:
    """Engine, boundary and database errors become a clear message and exit code 2; anything
    unexpected a short message, a log holding the traceback, and exit code 3."""
    try:
        yield
    except (AnnotationError, BoundaryError, UnsafeWrite) as e:
        for line in str(e).splitlines() or [""]:
            err.print(f"[red]error:[/] {literal(line)}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    except sqlite3.Error as e:
        err.print(f"[red]error:[/] the annotation database failed: {literal(e)}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    except (typer.Exit, typer.Abort, TyperException, click.exceptions.Exit,
            click.ClickException, click.Abort):
        raise
    except Exception as e:  # noqa: BLE001  (the last line of defence: never a raw traceback)
        _internal(e)


def _internal(e: BaseException) -> None:
    """The main command's report of an unexpected error (the traceback in the user's cache
    folder's logs/, as the README says), from inside the ``except`` that caught ``e``."""
    raise typer.Exit(internal_error()) from None


@contextmanager
def _store(db: Path | None) -> Iterator[Store]:
    """The store, closed on leaving; the rows of the database it left out (not careful's) are
    then listed, one ``db [round/annotator/function]: reason`` line each (:func:`_done`
    ends the command with exit code 1 for them, after its output)."""
    from careful_engine.annotation.store import Store, default_db_path

    store = Store(db or default_db_path())
    try:
        yield store
    finally:
        store.close()
        for line in store.problems:
            err.print(f"[yellow]problem:[/] {literal(line)}", highlight=False)


def _done(store: Store) -> None:
    """Exit code 1 where rows of the database were left out (listed by :func:`_store`)."""
    if store.problems:
        raise typer.Exit(EXIT_PROBLEMS)


def _names(value: str | list[str] | None) -> list[str] | None:
    """Names from a repeatable name option (:func:`parse_names`: ``-a A1 -a A2`` ==
    ``-a A1,A2``), None for none."""
    from careful_engine.annotation.names import parse_names

    return parse_names(value) or None


def _yn(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _llm_pairs(llm: list[str] | None) -> dict[str, str]:
    models: dict[str, str] = {}
    for item in llm or []:
        who, sep, model = item.partition("=")
        if not sep or not who or not model:
            raise typer.BadParameter(f"expected NAME=MODEL, got {item!r}", param_hint="--llm")
        models[who] = model
    return models


def _print_reveals(reveals: list[dict] | tuple[dict, ...], round_name: str) -> None:
    """The round's reveal log: every time its labels were opened, by whom, and why (the last
    20 overrides and 5 other openings)."""
    from careful_engine.present.agreement import reveal_lines

    shown = reveal_lines(reveals, 20, 5)
    console.print(f"[bold]reveal log of round {literal(round_name)}[/] "
                  f"({len(reveals)} {'entry' if len(reveals) == 1 else 'entries'}"
                  + ("; the last 20 overrides and 5 other openings shown, every entry in "
                     "`careful agree --json`)" if len(shown) < len(reveals) else ")"))
    for line in shown:
        text = literal(line.text)
        console.print(f"  [yellow]{text}[/]" if line.override else f"  {text}")


# ---------------------------------------------------------------------- round


@round_app.command("new")
def round_new(
    name: str = typer.Argument(..., help="Round name (letters, digits, '.', '_', '-')."),
    declarations: Path = typer.Option(
        None, "--declarations", "-d", help="Effect declarations JSON giving each function's "
        "kind and the signals' proposal. Default: declarations/effects.json if present, else "
        "all 128 functions with kind unknown and no proposal."),
    functions: str = typer.Option(
        "all", "--functions", "-f", help="'all', 'writes', or a comma-separated list."),
    annotator: list[str] = typer.Option(
        None, "--annotator", "-a", "--annotators", help="A human annotator of the round (repeatable, or comma-separated). "
        + NAME_HELP),
    llm: list[str] = typer.Option(
        None, "--llm", help="A language-model annotator as NAME=MODEL (repeatable)."),
    blind: bool = typer.Option(
        True, "--blind/--not-blind", help="Blind: annotators never see each other's labels."),
    by: str = typer.Option(None, "--by", help="Who creates the round. Default: $USER."),
    note: str = typer.Option("", "--note", help="A free-text note stored with the round."),
    db: Path = DB_OPTION,
) -> None:
    """Create a labelling round: its functions, their kinds and proposals, its annotators.

    The inputs are frozen with the sha256 of the declarations file, so every label refers to
    one version of them. The roster is fixed here; its creator may add or remove annotators
    and close the round later.
    """
    models = _llm_pairs(llm)
    with _guard():
        humans = [check_name(a) for a in _names(annotator) or []]
        models = {check_name(k): v for k, v in models.items()}
        inputs = load_inputs(declarations)
        which = (functions if functions in ("all", "writes")
                 else [f.strip() for f in functions.split(",") if f.strip()])
        inputs = inputs.select(which)
        with _store(db) as store:
            rnd = store.new_round_with_roster(name, inputs, humans, models, blind=blind,
                                              created_by=by or _user(), note=note)
            status = store.status(rnd.name)
    console.print(
        f"round [bold]{literal(rnd.name)}[/]: {status.functions} functions "
        f"({status.writes} writes), {'blind' if rnd.blind else 'not blind'}, "
        f"declarations {literal(rnd.declarations_source)} "
        f"(sha256 {literal(str(rnd.declarations_sha256)[:12])}), "
        f"annotators: {literal(', '.join(p.annotator for p in status.progress)) or 'none yet'}"
    )
    _done(store)


@round_app.command("add")
def round_add(
    name: str = typer.Argument(..., help=ROUND_HELP),
    annotator: list[str] = typer.Option(None, "--annotator", "-a", "--annotators", help="Human (repeatable, or comma-separated)."),
    llm: list[str] = typer.Option(None, "--llm", help="NAME=MODEL (repeatable)."),
    by: str = typer.Option(None, "--by", help="Who asks (the round's creator). Default: $USER."),
    db: Path = DB_OPTION,
) -> None:
    """Add annotators to a round that is still open (its creator only).

    Refused once every annotator has submitted, the creator closed the round, or its
    adjudication has begun (a manual decision or a boundary recorded)."""
    if not annotator and not llm:
        raise typer.BadParameter("name at least one --annotator or --llm")
    models = _llm_pairs(llm)
    with _guard(), _store(db) as store:
        names = store.add_to_roster(name, _names(annotator) or [], models, by=by or _user())
    console.print(f"round {literal(name)}: annotators {literal(', '.join(names))}")
    _done(store)


@round_app.command("remove")
def round_remove(
    name: str = typer.Argument(..., help=ROUND_HELP),
    annotator: list[str] = typer.Option(..., "--annotator", "-a", "--annotators", help="Whom (repeatable, or comma-separated)."),
    by: str = typer.Option(None, "--by", help="Who asks (the round's creator). Default: $USER."),
    db: Path = DB_OPTION,
) -> None:
    """Take annotators who have not submitted off a round (its creator only), before its
    adjudication begins.

    Their labels are kept in the database but no longer count in agreement or adjudication.
    """
    with _guard(), _store(db) as store:
        for who in _names(annotator) or []:
            store.remove_from_round(name, who, by=by or _user())
        names = store.round_annotators(name)
    console.print(f"round {literal(name)}: annotators {literal(', '.join(names)) or 'none'}")
    _done(store)


@round_app.command("close")
def round_close(
    name: str = typer.Argument(..., help=ROUND_HELP),
    by: str = typer.Option(None, "--by", help="Who asks (the round's creator). Default: $USER."),
    db: Path = DB_OPTION,
) -> None:
    """Close a round now (its creator only): labelling stops and adjudication opens."""
    with _guard(), _store(db) as store:
        stamp = store.close_round(name, by=by or _user(), account=_user())
    console.print(f"round {literal(name)} closed at {_stamp(stamp)}")
    _done(store)


@round_app.command("status")
def round_status(
    name: str = typer.Argument(None, help="A round; without it, every round is listed."),
    db: Path = DB_OPTION,
) -> None:
    """Progress of a round (counts only: no label is shown) and its reveal log, or the list
    of rounds."""
    with _guard(), _store(db) as store:
        if name is None:
            table = Table(title=f"Rounds in {literal(store.path)}")
            for col in ("round", "created", "by", "functions", "blind", "annotators",
                        "submitted", "state"):
                table.add_column(col)
            for rnd in store.rounds():
                st = store.status(rnd.name)
                done = sum(p.submitted is not None for p in st.progress)
                table.add_row(
                    literal(rnd.name), _stamp(rnd.created), literal(rnd.created_by),
                    str(st.functions), _yn(rnd.blind), str(len(st.progress)),
                    f"{done}/{len(st.progress)}", "closed" if st.closed else "open",
                )
            console.print(table)
            _done(store)
            return
        st = store.status(name)
    rnd = st.round
    console.print(
        f"round [bold]{literal(rnd.name)}[/] — {st.functions} functions ({st.writes} writes); "
        f"{'blind' if rnd.blind else 'not blind'}; declarations "
        f"{literal(rnd.declarations_source)} "
        f"(sha256 {literal(str(rnd.declarations_sha256)[:12])}); "
        f"[bold]{'closed' if st.closed else 'open'}[/]"
        + (f" by {literal(rnd.closed_by)} at {_stamp(rnd.closed_at)}" if rnd.closed_by
           else "")
    )
    table = Table()
    for col in ("annotator", "kind", "model", "labelled", "submitted"):
        table.add_column(col)
    for p in st.progress:
        table.add_row(literal(p.annotator), literal(p.kind), literal(p.model or ""),
                      f"{p.labelled}/{p.total}", _stamp(p.submitted))
    console.print(table)
    if st.reveals:
        _print_reveals(st.reveals, rnd.name)
    _done(store)


@round_app.command("submit")
def round_submit(
    name: str = typer.Argument(..., help=ROUND_HELP),
    annotator: str = typer.Option(..., "--annotator", "-a", help="Whose label set to submit."),
    db: Path = DB_OPTION,
) -> None:
    """Submit (freeze) an annotator's complete label set."""
    with _guard(), _store(db) as store:
        stamp = store.annotator_session(name, annotator).submit()
        closed = store.is_closed(name)
    console.print(f"{literal(annotator)} submitted round {literal(name)} at {_stamp(stamp)}"
                  + ("; the round is closed" if closed else ""))
    _done(store)


# ---------------------------------------------------------------------- label

_PROMPT = "destructive? y REASON | n [REASON] | s skip | ? source | q quit > "


def _say(text: str) -> None:
    console.print(text, highlight=False)
    sys.stdout.flush()


def _describe(session: AnnotatorSession, name: str, index: int, count: int,
              show_source: bool) -> None:
    fn = session.function(name)
    facts = [fn.kind if fn.kind != "unknown" else "kind unknown"]
    if fn.proposed is not None:
        signals = fn.extra.get("signals")
        facts.append("signals propose: " + ("destructive" if fn.proposed else "not destructive")
                     + (f" ({', '.join(map(str, signals))})" if signals else ""))
    _say(f"\n[bold][{index}/{count}] {literal(fn.cls)}.{literal(fn.name)}[/] — "
         f"{literal('; '.join(facts))}")
    doc = bfcl.all_func_docs().get(name, {})
    description = str(doc.get("description", ""))
    _say(literal(description[:600] + ("…" if len(description) > 600 else "")))
    params = doc.get("parameters", {}).get("properties", {})
    if params:
        _say("parameters: " + literal(", ".join(params)))
    own = session.labels().get(name)
    if own:
        _say(f"your label: {_yn(own.destructive)}" + (f" — {literal(own.reason)}"
                                                       if own.reason else ""))
    if show_source:
        _show_source(session, name)


def _show_source(session: AnnotatorSession, name: str) -> None:
    from careful_engine.annotation.llm import simulator_source

    console.print(literal(simulator_source(session.function(name)), keep_newlines=True),
                  highlight=False)
    sys.stdout.flush()


def _label_loop(session: AnnotatorSession, names: list[str], show_source: bool) -> str:
    """Ask for each function in turn; returns 'done', 'quit' or 'eof'."""
    total = len(session.functions())
    for i, name in enumerate(names, 1):
        _describe(session, name, i, len(names), show_source)
        while True:
            sys.stdout.write(_PROMPT)
            sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                _say("")
                return "eof"
            word, _, reason = line.strip().partition(" ")
            word = word.lower()
            if word in ("q", "quit"):
                return "quit"
            if word in ("s", "skip"):
                break
            if word in ("?", "source"):
                _show_source(session, name)
                continue
            if word in ("y", "yes", "n", "no"):
                try:
                    session.label(name, word.startswith("y"), reason)
                except LabelError as e:
                    _say(f"[red]{literal(e)}[/]")
                    continue
                done = total - len(session.remaining())
                _say(f"saved {literal(name)} = {'yes' if word.startswith('y') else 'no'} "
                     f"({done}/{total})")
                break
            _say("answer y or n (y needs a reason), s, ? or q")
    return "done"


@app.command("label")
def label(
    round_: str = typer.Option(..., "--round", "-r", help=ROUND_HELP),
    annotator: str = typer.Option(..., "--annotator", "-a", help="Who is labelling."),
    function: list[str] = typer.Option(
        None, "--function", "-f", help="Only these functions (repeatable)."),
    revise: bool = typer.Option(
        False, "--revise", help="Go through labelled functions too (before submitting)."),
    submit: bool = typer.Option(
        False, "--submit", help="Submit the label set when every function is labelled."),
    source: bool = typer.Option(
        False, "--source", help="Show each function's simulator source."),
    override: str = typer.Option(
        None, "--override", help="Open labels another login wrote under this name while the "
        "blind round is open; the reason is recorded in the round's reveal log."),
    db: Path = DB_OPTION,
) -> None:
    """Label functions in a plain terminal loop (works with piped input, one answer a line).

    Answer 'y REASON' (destructive; a reason is required), 'n' (not destructive; a reason is
    required when departing from the signals' proposal), 's' to skip, '?' for the source, 'q'
    to quit. Each answer is committed at once: quitting or a crash loses nothing. You see only
    your own labels: the labels under a name belong to the login that wrote the first of them,
    and another login opens them in a blind, open round only with --override (recorded).
    """
    with _guard(), _store(db) as store:
        session = store.annotator_session(round_, annotator, override=override)
        if session.overridden:
            err.print(f"[yellow]{literal(annotator)}'s labels opened with an override by "
                      f"{literal(session.account)} (recorded in the reveal log)[/]")
        if session.round.closed_by:
            raise typer.BadParameter(
                f"round {session.round_name} was closed by {session.round.closed_by}; labels "
                "are final", param_hint="--round")
        if session.submitted:
            raise typer.BadParameter(
                f"{annotator} has submitted round {round_} already; labels are final",
                param_hint="--annotator",
            )
        if function:
            for name in function:
                session.function(name)
            names = list(dict.fromkeys(function))
        else:
            names = [f.name for f in session.functions()] if revise else session.remaining()
        total = len(session.functions())
        _say(f"round {literal(session.round_name)}, annotator {literal(session.annotator)}: "
             f"{total - len(session.remaining())}/{total} labelled, {len(names)} to go")
        outcome = _label_loop(session, names, source) if names else "done"
        left = session.remaining()
        if not left and submit:
            stamp = session.submit()
            _say(f"submitted at {_stamp(stamp)}")
        elif not left:
            _say(f"all {total} functions labelled; submit with `careful round submit "
                 f"{literal(session.round_name)} --annotator {literal(session.annotator)}` "
                 "or --submit")
        else:
            _say(f"{len(left)} functions left; rerun to continue ({outcome})")
    _done(store)


# ---------------------------------------------------------------------- agree


def _agreement_tables(report: AgreementReport, title: str) -> list[Table]:
    from careful_engine.present.agreement import PAIR_COLUMNS, agreement_tables

    tables = agreement_tables(report)
    pairs = Table(title=f"{title}: {tables.title}")
    for col in PAIR_COLUMNS:
        pairs.add_column(col, justify="left" if col == "pair" else "right")
    for row in tables.pairs:
        pairs.add_row(*map(literal, row))
    overall = Table(show_header=False, box=None)
    for row in tables.overall:
        overall.add_row(*map(literal, row))
    return [pairs, overall]


@app.command("agree")
def agree(
    round_: str = typer.Option(..., "--round", "-r", help=ROUND_HELP),
    subset: str = typer.Option(
        "both", "--subset", help="'writes', 'all' or 'both'."),
    annotators: Annotators = None,
    by: str = typer.Option(None, "--by", help="Who asks (recorded). Default: $USER."),
    override: str = typer.Option(
        None, "--override", help="Open a blind round before every annotator has submitted; "
        "the reason given is recorded."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    db: Path = DB_OPTION,
) -> None:
    """Agreement of a closed round, on the writes and on all functions, and the splits.

    Raw agreement and Cohen's κ for every pair, Fleiss' κ over all annotators and
    Krippendorff's α (nominal), with the label domain pinned to yes/no; then every function
    the annotators split on (in the subset; with both, among all functions), with who said
    what and why.
    """
    if subset not in ("writes", "all", "both"):
        raise typer.BadParameter("expected writes, all or both", param_hint="--subset")
    with _guard(), _store(db) as store:
        session = store.adjudication_session(round_, by or _user(), override=override)
        chosen = _names(annotators)
        if subset == "writes" and not session.declares_writes():
            raise typer.BadParameter("the round's inputs declare no writes",
                                     param_hint="--subset")
        subsets = session.subsets(subset)
        reports = {s: session.agreement(s, chosen) for s in subsets}
        split_list = session.splits(subsets[-1], chosen)  # the widest subset asked for
        reveals = session.reveal_log()
    if as_json:
        print(json.dumps({
            "round": session.round_name,
            "agreement": {s: r.to_json() for s, r in reports.items()},
            "splits": [s.to_json() for s in split_list],
            "reveals": reveals,
        }, indent=2, ensure_ascii=True))
        _done(store)
        return
    if session.overridden:
        console.print("[yellow]opened with an override (recorded); the round is not closed[/]")
    if "writes" not in reports and subset == "both":
        console.print("the round's inputs declare no writes: agreement on all functions only")
    for s, report in reports.items():
        for table in _agreement_tables(report, "Writes" if s == "writes" else "All functions"):
            console.print(table)
    # names fold at separators, never cut; the reasons in a table of their own, whose
    # prose column takes the room the names leave (beside six name columns it had none)
    table = NameTable(title=f"Splits ({len(split_list)})")
    for col in ("function", "class", "kind", "proposal", "yes", "no"):
        table.add_column(Name(col))
    reasons = NameTable(title=f"Reasons of the splits ({len(split_list)})")
    for col in ("function", "by"):
        reasons.add_column(Name(col))
    reasons.add_column(Name("reason"), overflow="fold")
    for s in split_list:
        table.add_row(Name(s.function), Name(s.cls), Name(s.kind), Name(_yn(s.proposed)),
                      Name(", ".join(s.yes)), Name(", ".join(s.no)))
        given = [(a, r) for a, r in s.reasons.items() if r]
        for i, (a, r) in enumerate(given):
            reasons.add_row(Name(s.function) if i == 0 else "", Name(a), Text(visible(r)),
                            end_section=i == len(given) - 1)
    console.print(table)
    if reasons.row_count:
        console.print(reasons)
    _print_reveals(reveals, session.round_name)
    _done(store)


# ---------------------------------------------------------------------- adjudicate


def _parse_decision(text: str) -> tuple[str, bool, str]:
    name, sep, rest = text.partition("=")
    verdict, _, reason = rest.partition(":")
    verdict = verdict.strip().lower()
    if not sep or not name.strip() or verdict not in ("yes", "no", "y", "n"):
        raise typer.BadParameter(f"expected FUNCTION=yes|no:REASON, got {text!r}",
                                 param_hint="--decide")
    if not reason.strip():
        raise typer.BadParameter(f"{name}: a decision needs a reason", param_hint="--decide")
    return name.strip(), verdict.startswith("y"), reason.strip()


@app.command("adjudicate")
def adjudicate(
    round_: str = typer.Option(..., "--round", "-r", help=ROUND_HELP),
    policy: str = typer.Option(
        "any", "--policy", "-p", help="any (destructive if any annotator says so), majority, "
        "unanimous, or annotator:NAME."),
    tie: str = typer.Option(
        "error", "--tie", help="Majority ties: yes, no, or error (stop and name them)."),
    annotators: Annotators = None,
    decide: list[str] = typer.Option(
        None, "--decide", help="Record a manual decision FUNCTION=yes|no:REASON (repeatable; "
        "appended, never overwriting a label; the latest per function wins)."),
    no_decisions: bool = typer.Option(
        False, "--no-decisions", help="Ignore recorded manual decisions."),
    author: str = typer.Option(None, "--author", help="Adjudicator. Default: $USER."),
    name: str = typer.Option(
        None, "--name", "-n", help="Boundary name. Default: <round>-<policy>."),
    out: Path = typer.Option(
        None, "--out", "-o", help="Boundary file. Default: <name>.json in the working folder "
        "(--boundary NAME finds it from there; the shipped declarations/boundary/ is written "
        "only when named here)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show the result (with the --decide decisions); write no "
        "boundary and no decision (an --override is still recorded: labels were seen)."),
    force: bool = typer.Option(
        False, "--force", help="Replace an existing boundary file (its version is "
        "incremented); one the boundary reader refuses is left as it is (exit code 2)."),
    override: str = typer.Option(
        None, "--override", help="Adjudicate a blind round that is still open; the reason is "
        "recorded."),
    created: str = typer.Option(
        None, "--created", help="Date recorded in the boundary file (YYYY-MM-DD; default "
        "today), so that a boundary regenerated from the same label sets is byte-identical."),
    db: Path = DB_OPTION,
) -> None:
    """Adjudicate a closed round and write the boundary file the scorer's --boundary reads."""
    if created is not None:
        try:
            created = _dt.date.fromisoformat(created).isoformat()
        except ValueError:
            raise typer.BadParameter(f"{created!r} is not a date YYYY-MM-DD",
                                     param_hint="--created") from None

    decisions = [_parse_decision(d) for d in decide or []]
    if tie not in TIES:
        raise typer.BadParameter(f"expected one of {', '.join(TIES)}", param_hint="--tie")
    with _guard():
        parse_policy(policy)
        with _store(db) as store:
            session = store.adjudication_session(round_, author or _user(), override=override)
            # the decisions are taken into account, and saved only with the boundary file
            # (a dry run, or a run that fails, records none)
            pending = [session.decision(*d) for d in decisions]
            result = session.adjudicate(policy, tie=tie, annotators=_names(annotators),
                                        use_decisions=not no_decisions, pending=pending)
            boundary_name = name or session.default_boundary_name(policy)
            path = None
            problem = name_problem(boundary_name)
            if problem and not dry_run:
                raise AnnotationError(problem + ("" if name else
                                                 " (made from the round's); give one with -n"))
            if not dry_run:
                out = out or boundary_mod.user_path(boundary_name)
                _, path = session.write_boundary(result, boundary_name, path=out, force=force,
                                                 created=created, decisions=pending)
    table = NameTable(title=f"{literal(boundary_name)}: {len(result.destructive)} destructive of "
                  f"{len(result.outcomes)} ({literal(policy)})")
    for col in ("function", "yes", "no", "by"):
        table.add_column(Name(col))
    for f, o in result.outcomes.items():
        if o.destructive or o.by != "policy" or (o.yes and o.no):
            table.add_row(Name(f, "bold" if o.destructive else "dim"), Name(", ".join(o.yes)),
                          Name(", ".join(o.no)),
                          Name(o.by + ("" if o.destructive else " (not destructive)")))
    console.print(table)
    if session.overridden:
        console.print("[yellow]opened with an override (recorded in the reveal log)[/]")
    if path:
        console.print(f"wrote {literal(path)}")
        if boundary_name not in boundary_mod.SHIPPED:
            console.print(f"score with it: --boundary {literal(path)}"
                          + (f" (or --boundary {literal(boundary_name)} from this folder)"
                             if same_file(path, boundary_mod.user_path(boundary_name)) else ""))
    else:
        console.print("dry run: no boundary and no decision written")
    _done(store)


# ---------------------------------------------------------------------- labels


@labels_app.command("export")
def labels_export(
    round_: str = typer.Option(..., "--round", "-r", help=ROUND_HELP),
    annotator: Annotators = None,
    out: Path = typer.Option(
        None, "--out", "-o", help="Folder. Default: annotations/<round>/."),
    by: str = typer.Option(None, "--by", help="Who exports (recorded). Default: $USER."),
    override: str = typer.Option(
        None, "--override", help="Export from a blind round that is still open (recorded; "
        "the files are readable by this login only)."),
    db: Path = DB_OPTION,
) -> None:
    """Write each annotator's label set, with reasons, as one JSON file (closed rounds)."""
    from careful_engine.annotation.release import write_label_sets

    with _guard(), _store(db) as store:
        session = store.adjudication_session(round_, by or _user(), override=override)
        paths = write_label_sets(session, out, _names(annotator))
        reveals = session.reveal_log()
    for p in paths:
        console.print(f"wrote {literal(p)}")
    _print_reveals(reveals, session.round_name)
    _done(store)


@labels_app.command("import")
def labels_import(
    files: list[Path] = typer.Argument(..., help="Label-set JSON files."),
    round_: str = typer.Option(
        None, "--round", "-r", help="Import into this round name (default: the file's)."),
    db: Path = DB_OPTION,
) -> None:
    """Import label sets; the round is created from the first file if the database lacks it.

    Several annotators' sets may go into one round, one file after another, until its
    adjudication begins: once a manual decision or a boundary is recorded for the round (or
    its creator closed it), a set for an annotator not on its roster is refused; once every
    annotator has submitted, so is a set that is not submitted (it would open the round
    again). Each file is
    checked whole first (every problem one line `file:line [function]: reason`)
    and imported in one transaction: a bad file creates nothing, and the other files go on.
    Exit code 0 when every file was imported, 1 when some were, 2 when none was.
    """
    from careful_engine.annotation.release import import_label_set, load_label_set

    failed = 0
    with _guard(), _store(db) as store:
        for path in files:
            try:
                labelset = load_label_set(path)
                name, n = import_label_set(store, labelset, round_)
            except AnnotationError as e:
                failed += 1
                for line in str(e).splitlines():
                    prefix = "" if line.startswith(str(path)) else f"{path}: "
                    err.print(f"[red]error:[/] {literal(prefix + line)}")
                continue
            labelled = sum(lb.destructive is not None for lb in labelset.labels)
            said = (f"{n} labels" if n else "already present" if labelled else
                    f"no labels (all {len(labelset.labels)} functions unlabelled); "
                    "on the round's roster")
            console.print(f"{literal(path)}: {literal(labelset.annotator)} -> round "
                          f"{literal(name)}: {said}")
    if failed:
        raise typer.Exit(EXIT_UNUSABLE if failed == len(files) else EXIT_PROBLEMS)
    _done(store)


# ---------------------------------------------------------------------- annotate-llm


@app.command("annotate-llm")
def annotate_llm(
    model: str = typer.Option(..., "--model", "-m", help="Anthropic model name."),
    annotator: str = typer.Option(..., "--annotator", "-a", help="Annotator name (e.g. A2)."),
    round_: str = typer.Option(..., "--round", "-r", help=ROUND_HELP),
    sheet: Path = typer.Option(
        None, "--sheet", help="Markdown review sheet (one section per function, without "
        "other annotators' labels). Default: a minimal sheet from bfcl's docs."),
    base_url: str = typer.Option(
        None, "--base-url", help="Messages API base URL. Default: $ANTHROPIC_BASE_URL or "
        "Anthropic's."),
    api_key: str = typer.Option(
        None, "--api-key", help="Default: $ANTHROPIC_API_KEY.", show_default=False),
    max_tokens: int = typer.Option(1024, "--max-tokens", min=16,
                                   help="The most tokens of one answer (one label)."),
    temperature: float = typer.Option(None, "--temperature", help="Default: the API's."),
    limit: int = typer.Option(None, "--limit", min=1, help="Label at most N functions."),
    join: bool = typer.Option(False, "--join", help="Add the annotator to the round (its creator only, as "
                              "`careful round add`)."),
    submit: bool = typer.Option(
        True, "--submit/--no-submit", help="Submit when every function is labelled."),
    db: Path = DB_OPTION,
) -> None:
    """Label every function with a language model through the Anthropic API.

    The model sees each function's review-sheet entry and simulator source, never the other
    labels, and is recorded as an ordinary annotator with its reasons and token usage. Each
    label is committed as it arrives; a rerun resumes where the last one stopped.
    """
    from careful_engine.annotation.llm import annotate

    def show(fn: str, destructive: bool | None, text: str) -> None:
        if destructive is None:
            err.print(f"[red]{literal(fn)}: failed[/] {literal(text[:200])}")
        else:
            console.print(f"{literal(fn)} = {_yn(destructive)}: {literal(text)}",
                          highlight=False)

    with _guard(), _store(db) as store:
        if sheet is not None and not sheet.is_file():
            raise typer.BadParameter(f"{sheet} is not a file", param_hint="--sheet")
        run = annotate(
            store, round_, annotator, model, api_key=api_key, base_url=base_url, sheet=sheet,
            max_tokens=max_tokens, temperature=temperature, limit=limit, submit=submit,
            join=join, on_result=show,
        )
    usage = ", ".join(f"{k} {v}" for k, v in run.usage.items())
    console.print(
        f"{literal(annotator)} ({literal(model)}): {len(run.labelled)} labelled, {len(run.skipped)} already "
        f"labelled, {len(run.failed)} failed; usage: {usage or 'none'}"
        + (f"; submitted at {_stamp(run.submitted)}" if run.submitted else "")
    )
    if run.failed:
        raise typer.Exit(EXIT_PROBLEMS)
    _done(store)
