"""The reference cache (careful_engine.core.refcache) never changes a verdict, and is never trusted
when it should not be.

* every real run in ../shared/runs scored with no cache, a cold cache and a warm one (loaded
  from disk by fresh worker processes, ``jobs=2``) gives byte-identical conversations.jsonl;
* every cached reference equals its live replay (calls, results, states, the attributes bfcl's
  state checker compares), and references that can depend on bfcl's process state or the model
  name are never cached;
* corrupted, truncated, foreign, planted (pickle), linked or mis-versioned entry files are
  rejected and rebuilt; a key file that is not private to this user turns the disk cache off.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import io
import json
import marshal
import os
import pickle
from pathlib import Path

import pytest

from careful_engine.core import bfcl, checker, refcache
from careful_engine.core.budget import DEFAULT_BUDGET, Meter
from careful_engine.core.environment import Environment
from careful_engine.core.process import BfclProcess
from careful_engine.core.refcache import disk, scope, store
from careful_engine.core.trajectory import Outcome, Step, Trajectory
from careful_engine.present.outputs import write_outputs
from careful_engine.scoring.score import score_run
from tests.traces import fingerprint, reference_sides

FC = "gpt-4o-2024-11-20-FC"
DECODERS = {"openai_gpt-oss-120b": FC, "glyphh-ada-1.1": FC,
            "deepseek-ai_DeepSeek-R1-0528": FC}
CATEGORY = "multi_turn_base"


def _runs(shared_runs: Path) -> list[Path]:
    return sorted(p for p in shared_runs.iterdir() if p.is_dir())


def _decoder(run: Path) -> str | None:
    models = {p.parent.parent.name if p.parent.name == "multi_turn" else p.parent.name
              for p in run.rglob("BFCL_v*_multi_turn_*_result.json")}
    keys = {DECODERS.get(m) for m in models}
    return keys.pop() if len(keys) == 1 else None


def _score_all(runs: list[Path], out: Path, jobs: int) -> dict[str, bytes]:
    got = {}
    for run in runs:
        scored = score_run(run, decoder=_decoder(run), effects=_effects(), jobs=jobs)
        write_outputs(scored, out / run.name, _effects())
        got[run.name] = (out / run.name / "conversations.jsonl").read_bytes()
    return got


_EFFECTS: list = []


def _effects():
    if not _EFFECTS:
        from careful_engine.scoring.score import load_effects

        _EFFECTS.append(load_effects())
    return _EFFECTS[0]


@pytest.fixture(scope="module")
def three_ways(shared_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    runs = _runs(shared_runs)
    base = tmp_path_factory.mktemp("refcache-modes")
    saved = {k: os.environ.get(k) for k in ("CAREFUL_REFCACHE", "CAREFUL_CACHE_DIR")}
    try:
        os.environ["CAREFUL_CACHE_DIR"] = str(base / "cache")
        os.environ["CAREFUL_REFCACHE"] = "off"
        refcache.clear_memory()
        off = _score_all(runs, base / "off", jobs=1)
        os.environ["CAREFUL_REFCACHE"] = "on"
        refcache.clear_memory()
        recorded = refcache.STATS["recorded"]
        cold = _score_all(runs, base / "cold", jobs=1)
        recorded = refcache.STATS["recorded"] - recorded
        refcache.clear_memory()  # the workers load what the cold pass wrote
        warm = _score_all(runs, base / "warm", jobs=2)
        files = sorted(p.name for p in (base / "cache" / "refcache").glob("*.bin"))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        refcache.clear_memory()
    return {"off": off, "cold": cold, "warm": warm, "recorded": recorded, "files": files}


def test_cache_never_changes_a_verdict(three_ways: dict) -> None:
    assert three_ways["off"], "no run scored"
    for run, lines in three_ways["off"].items():
        assert lines.count(b"\n") == 200 * len(_categories(lines)), run
        assert three_ways["cold"][run] == lines, f"{run}: cold cache differs from no cache"
        assert three_ways["warm"][run] == lines, f"{run}: warm cache differs from no cache"


def test_cold_pass_recorded_and_stored_every_category(three_ways: dict) -> None:
    categories = {f.split("-", 1)[0] for f in three_ways["files"]}
    assert categories == set(bfcl.CATEGORIES)
    # each reference recorded once, from the first live replay that ran it
    assert 0 < three_ways["recorded"] <= 4 * 200


# ---------------------------------------------------------------- cached == live, per reference
def _live(conv: bfcl.Conversation, model: str):
    """The live reference side, turn by turn: (records, end state, instances) per turn (the
    instances as they are right then: read them before the next turn)."""
    env = Environment.for_conversation(conv, "reference", model_name=model,
                                       meter=Meter(DEFAULT_BUDGET))
    for t, texts in enumerate(conv.ground_truth):
        yield [env.execute(x, t, -1) for x in texts], env.state, env.instances


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_every_cached_reference_equals_its_live_replay(category: str) -> None:
    """Each reference the cache holds, against a live replay of it from a fresh process
    state; a guarded one (see refcache.guardable) also leaves bfcl's shared objects as the
    live replay leaves them."""
    model = "Some-Model_v1.5"
    refcache.warm((category,))
    refcache.clear_memory()  # the entries as written and read back
    cached_n = guarded_n = 0
    for conv in bfcl.conversations(category):
        classes = refcache.process_classes(conv)
        BfclProcess()
        # the live side first, whole (a guarded side checks the shared objects it starts
        # each turn from: the live replay must not change them under it)
        live = [(records, end, copy.deepcopy(instances))
                for records, end, instances in _live(conv, model)]
        after_live = BfclProcess.checkpoint(classes)
        BfclProcess()
        side = refcache.reference_side(conv, model, True, None, None)
        if refcache.depends_on_process(conv) and not refcache.guardable(conv):
            assert side is None or type(side) is refcache.LoadedSide, conv.id
            continue
        if side is None:
            continue  # left out at build time (model name in an argument, budget, format)
        assert type(side) is refcache.CachedSide, conv.id
        assert (side._d.guards is not None) == refcache.depends_on_process(conv), conv.id
        cached_n += 1
        guarded_n += side._d.guards is not None
        assert side.env.state == Environment.for_conversation(
            conv, "reference", model_name=model).state
        for t, (records, end, instances) in enumerate(live):
            got = side.run(t, -1, conv.ground_truth[t])
            assert [(r.text, r.call, r.result, r.success, r.class_name, r.turn, r.step)
                    for r in got] == [(r.text, r.call, r.result, r.success, r.class_name,
                                       r.turn, r.step) for r in records], (conv.id, t)
            for g, w in zip(got, records, strict=True):
                assert g.state_before == w.state_before and g.state_after == w.state_after
                assert g.changed == w.changed and g.diff() == w.diff(), (conv.id, t)
            assert side.env.state == end and side.env.state.plain() == end.plain()
            # what bfcl's state checker reads: the same attributes, equal both ways
            assert list(side.env.instances) == list(instances)
            for c, inst in instances.items():
                view = side.env.instances[c]
                attrs = {k: v for k, v in vars(inst).items() if not k.startswith("_")}
                assert list(vars(view)) == list(attrs), (conv.id, c)
                assert checker.compare_instances(inst, view) == {}, (conv.id, t, c)
                for k, v in attrs.items():
                    assert not (getattr(view, k) != v) and not (v != getattr(view, k))
        if classes:
            assert BfclProcess.checkpoint(classes) == after_live, conv.id
    assert cached_n >= 50, f"only {cached_n} references of {category} cached"
    if category != "multi_turn_long_context":  # TwitterAPI's references: guarded
        assert guarded_n >= 30, f"only {guarded_n} guarded references of {category}"


def _tweet_after(conv: bfcl.Conversation, turns: int, content: str) -> tuple[str, str, int]:
    """The calls that authenticate ``conv``'s TwitterAPI user and post ``content``, and the id
    that tweet gets after the reference's first ``turns`` turns (found by a probe whose
    changes to bfcl's shared objects are then forgotten)."""
    probe = Environment.for_conversation(conv)
    tw = probe.instances["TwitterAPI"]
    auth = f"authenticate_twitter(username={tw.username!r}, password={tw.password!r})"
    post = f"post_tweet(content={content!r})"
    for texts in conv.ground_truth[:turns]:
        for text in texts:
            probe.execute(text)
    probe.execute(auth)
    tweet_id = json.loads(probe.execute(post).result)["id"]
    BfclProcess()
    return auth, post, tweet_id


def _replayed(conv: bfcl.Conversation, model: Trajectory,
              classes: tuple[str, ...]) -> tuple[str, bytes]:
    """A replay from a fresh process: its trace's fingerprint and bfcl's shared objects of
    ``classes`` afterwards."""
    from careful_engine.core.replay import replay

    proc = BfclProcess()
    trace = replay(conv, model, model_name="m", process=proc)
    return fingerprint(trace), proc.checkpoint(classes)


def _mentioning_model(conv: bfcl.Conversation) -> Trajectory:
    """The reference's own calls, plus in turn 1 a tweet posted with post_tweet's default
    mentions list and a mention added to it: bfcl's shared default grows under the
    reference, which then starts turn 1 from values its guarded entry never saw."""
    auth, post, tweet_id = _tweet_after(conv, 2, "careful probe")
    extra = [auth, post, f"mention(tweet_id={tweet_id}, mentioned_usernames=['@careful'])"]
    turns = [[Step(raw=list(texts), outcome=Outcome.CALLS, calls=list(texts))]
             for texts in conv.ground_truth]
    turns[1].append(Step(raw=extra, outcome=Outcome.CALLS, calls=extra))
    return Trajectory(id=conv.id, turns=turns, raw_result=[])


def test_a_guarded_reference_whose_shared_values_change_is_replayed_live(
        private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that grows post_tweet's shared default in turn 1: the guarded entry no longer
    holds for turn 1, the conversation is replayed again with the reference live, and the
    trace, the verdict and bfcl's shared objects afterwards are those of a replay without
    the cache. A conversation that starts from shared values other than the recorded ones
    does not take the entry at all."""
    from careful_engine.core import process
    from careful_engine.core.replay import replay

    conv = next(c for c in bfcl.conversations(CATEGORY) if "TwitterAPI" in c.involved_classes
                and len(c.ground_truth) > 2 and refcache.guardable(c))
    classes = refcache.process_classes(conv)
    model = _mentioning_model(conv)
    monkeypatch.setenv("CAREFUL_REFCACHE", "off")
    live = _replayed(conv, model, classes)
    assert b"@careful" in live[1]  # the default did grow
    monkeypatch.setenv("CAREFUL_REFCACHE", "on")
    refcache.warm((CATEGORY,))
    diverged: list[str] = []
    real_run = refcache.CachedSide.run

    def watched(self, turn, step, texts):  # noqa: ANN001, ANN202
        try:
            return real_run(self, turn, step, texts)
        except refcache.Diverged as e:
            diverged.append(str(e))
            raise

    monkeypatch.setattr(refcache.CachedSide, "run", watched)
    counted = refcache.STATS["diverged"]
    assert _replayed(conv, model, classes) == live
    assert diverged == ["turn 1"] and refcache.STATS["diverged"] == counted + 1
    # from a process whose shared default already holds a mention: never the entry
    diverged.clear()
    kinds = reference_sides(monkeypatch)
    proc = BfclProcess()
    module = __import__(bfcl.CLASS_FILE_PATH_MAPPING["TwitterAPI"], fromlist=["TwitterAPI"])
    module.TwitterAPI.post_tweet.__defaults__[1].append("@earlier")
    start = proc.checkpoint(classes)
    trace = replay(conv, model, model_name="m", process=proc)
    got = (fingerprint(trace), proc.checkpoint(classes))
    monkeypatch.setenv("CAREFUL_REFCACHE", "off")
    proc.restore(classes, start)
    want = replay(conv, model, model_name="m", process=proc)
    assert got == (fingerprint(want), proc.checkpoint(classes))
    assert kinds[0] == "LoadedSide" and not diverged
    process.reset_to_pristine()


def test_a_guarded_reference_that_grows_a_shared_default_hands_it_on(
        private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference whose turn grows post_tweet's shared default (no dataset reference does,
    so a variant stands in for one): taken from the cache, it leaves the default as the
    live reference does, and the model's later tweet inherits the mention either way."""
    import dataclasses

    conv = next(c for c in bfcl.conversations(CATEGORY) if "TwitterAPI" in c.involved_classes
                and len(c.ground_truth) > 1 and refcache.guardable(c))
    auth, post, tweet_id = _tweet_after(conv, 1, "reference")
    gt = [list(t) for t in conv.ground_truth]
    gt[0] += [auth, post, f"mention(tweet_id={tweet_id}, mentioned_usernames=['@ref'])"]
    variant = dataclasses.replace(conv, ground_truth=gt)
    real_index = bfcl.conversation_index
    monkeypatch.setattr(bfcl, "conversation_index",
                        lambda: {**real_index(), conv.id: variant})
    later = [auth, "post_tweet(content='model')"]
    turns = [[Step(raw=list(t), outcome=Outcome.CALLS, calls=list(t))] for t in gt]
    turns[0] = [Step(raw="", outcome=Outcome.NO_CALL, calls=[])]
    turns[1] = [Step(raw=later, outcome=Outcome.CALLS, calls=later)] + turns[1]
    model = Trajectory(id=conv.id, turns=turns, raw_result=[])
    classes = refcache.process_classes(conv)
    kinds = reference_sides(monkeypatch)
    monkeypatch.setenv("CAREFUL_REFCACHE", "off")
    live = _replayed(variant, model, classes)
    assert b"@ref" in live[1] and '"@ref"' in live[0]
    monkeypatch.setenv("CAREFUL_REFCACHE", "on")
    assert [_replayed(variant, model, classes) for _ in range(3)] == [live] * 3
    assert kinds == ["NoneType", "LoadedSide", "RecordingSide", "CachedSide+guards"]
    BfclProcess()


def test_process_bound_and_name_bound_references_are_live() -> None:
    twitter = next(c for c in bfcl.conversations(CATEGORY) if "TwitterAPI" in c.involved_classes)
    assert refcache.depends_on_process(twitter) and refcache.guardable(twitter)
    travel = [c for c in bfcl.conversations("multi_turn_long_context")
              if "TravelAPI" in c.involved_classes]
    assert travel and all(refcache.depends_on_process(c) and not refcache.guardable(c)
                          for c in travel)
    plain = next(c for c in bfcl.conversations(CATEGORY) if not refcache.depends_on_process(c))
    assert refcache.reference_side(plain, "fine_name", True, None, None) is not None
    # a model name bfcl's rewrite would turn into invalid syntax, and a replay without
    # snapshots or with other tree limits, are replayed live
    assert refcache.reference_side(plain, "odd name+", True, None, None) is None
    assert refcache.reference_side(plain, "fine_name", False, None, None) is None
    import dataclasses

    small = dataclasses.replace(DEFAULT_BUDGET, max_tree_entries=10)
    assert refcache.reference_side(plain, "fine_name", True, small, None) is None
    slow = dataclasses.replace(DEFAULT_BUDGET, seconds=5.0)
    assert refcache.reference_side(plain, "fine_name", True, slow, None) is not None


def test_a_replay_records_what_a_reference_alone_builds(private_cache: Path) -> None:
    """The entries replays record (kept as they ran, encoded when first asked for) hold
    exactly what :func:`refcache.build_entry` makes of each reference replayed alone."""
    from careful_engine.core.replay import replay

    model = "Some-Model_v1.5"
    process = BfclProcess()
    convs = [c for c in bfcl.conversations(CATEGORY) if not refcache.depends_on_process(c)]
    for conv in convs:
        replay(conv, None, model_name=model, process=process)
    cat = store._category(CATEGORY)
    pending = [i for i, e in cat.entries.items() if type(e) is store._Pending]
    assert len(pending) == len(convs)  # nothing encoded while the replays ran
    compared = 0
    for conv in convs:
        got = store._settled(cat, conv.id)
        try:
            want = refcache.build_entry(conv, model)
        except refcache.Uncacheable:
            assert got is None, conv.id
            continue
        assert got is not None and cat.encoded[conv.id][0] is got, conv.id
        body = {k: v for k, v in got.items() if k != "templates"}
        assert marshal.loads(cat.encoded[conv.id][1]) == body
        assert body == {k: v for k, v in want.items() if k != "templates"}, conv.id
        assert got["templates"] == want["templates"], conv.id
        compared += 1
    assert compared >= 100
    written = sorted(cat.encoded)
    refcache.flush()  # written as encoded, and read back
    refcache.clear_memory()
    cat = store._category(CATEGORY)
    assert len(written) == compared
    assert all(store._decoded(cat, i) is not None for i in written)


def test_an_entry_holding_the_model_name_is_not_cached() -> None:
    conv = next(c for c in bfcl.conversations(CATEGORY) if not refcache.depends_on_process(c)
                and "GorillaFileSystem" in c.involved_classes)
    fs = dict(conv.__dict__)
    fs["ground_truth"] = [["echo(content='run ls(a=True) later', file_name='x.txt')"]]
    sneaky = bfcl.Conversation(**fs)
    for model in (refcache.SENTINEL, "Real-Model.v2"):  # the recorder's own name, whatever it is
        with pytest.raises(refcache.Uncacheable):
            refcache.build_entry(sneaky, model)
    fs["ground_truth"] = [["echo(content='run it later', file_name='x.txt')"]]
    assert refcache.build_entry(bfcl.Conversation(**fs), "Real-Model.v2")["turns"]



def test_the_replay_code_hash_covers_every_core_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine version hashes every module of careful_engine/core, the refcache package's
    own included: a change to any of them (replay.py, each refcache module) gives another
    version, so no entry recorded by other code is used."""
    core = Path(scope.__file__).resolve().parent.parent
    files = [core / "replay.py", *sorted((core / "refcache").glob("*.py"))]
    assert len(files) > 6
    changed: list[Path] = []
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        return real(self) + (b"\n# changed" if self in changed else b"")

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(scope, "_ENGINE", [])  # computed afresh here, the real one kept
    base = refcache.replay_code_hash()
    for path in files:
        changed[:] = [path]
        scope._ENGINE.clear()
        assert refcache.replay_code_hash() != base, path

# ---------------------------------------------------------------- hostile cache files
@pytest.fixture()
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CAREFUL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CAREFUL_REFCACHE", "on")
    refcache.clear_memory()
    yield tmp_path / "c" / "refcache"
    refcache.clear_memory()


def _entry_path(folder: Path) -> Path:
    return disk._path(folder, CATEGORY)


def _load() -> None:
    refcache.clear_memory()
    refcache.warm((CATEGORY,))


def _stats() -> dict:
    return dict(refcache.STATS)


def _valid_after_rebuild(folder: Path, before: dict) -> None:
    after = _stats()
    assert after["rejected"] >= before["rejected"] + 1
    assert after["recorded"] >= before["recorded"] + 100
    assert after["written"] == before["written"] + 1
    s = _stats()
    _load()  # what was rebuilt loads
    assert _stats()["loaded"] == s["loaded"] + 1 and _stats()["recorded"] == s["recorded"]


def test_a_written_entry_loads_without_rebuilding(private_cache: Path) -> None:
    _load()
    assert _entry_path(private_cache).is_file()
    s = _stats()
    _load()
    assert _stats()["loaded"] == s["loaded"] + 1 and _stats()["recorded"] == s["recorded"]
    key = private_cache / "key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "magic", "foreign_key",
                                    "other_version", "pickle_bomb", "garbage_mac_ok"])
def test_damaged_or_foreign_entries_are_rebuilt(private_cache: Path, tmp_path: Path,
                                                damage: str) -> None:
    _load()
    path = _entry_path(private_cache)
    data = path.read_bytes()
    key = (private_cache / "key").read_bytes()
    n = len(refcache.MAGIC)
    canary = tmp_path / "canary"

    def signed(payload: bytes, k: bytes = key) -> bytes:
        return refcache.MAGIC + hmac.new(k, refcache.MAGIC + payload,
                                         hashlib.sha256).digest() + payload

    if damage == "flip":
        i = len(data) // 2
        new = data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
    elif damage == "truncate":
        new = data[: len(data) // 3]
    elif damage == "empty":
        new = b""
    elif damage == "magic":
        new = b"X" + data[1:]
    elif damage == "foreign_key":  # another install's valid entry
        new = signed(data[n + 32:], os.urandom(32))
    elif damage == "other_version":  # signed, but for another engine version
        doc = marshal.loads(data[n + 32:])
        doc["header"]["engine"] = "0" * 24
        new = signed(marshal.dumps(doc))
    elif damage == "pickle_bomb":  # code that would run if the file were unpickled

        class Bomb:
            def __reduce__(self):
                return (os.system, (f"touch {canary}",))

        buf = io.BytesIO()
        pickle.dump(Bomb(), buf)
        new = refcache.MAGIC + os.urandom(32) + buf.getvalue()
    else:  # correctly signed, but not a cache document
        new = signed(b"\xff\x00garbage")
    path.write_bytes(new)
    s = _stats()
    _load()
    _valid_after_rebuild(private_cache, s)
    assert not canary.exists()
    # and the rebuilt entry gives what a live replay gives
    conv = next(c for c in bfcl.conversations(CATEGORY) if not refcache.depends_on_process(c))
    side = refcache.reference_side(conv, "m", True, None, None)
    records = next(_live(conv, "m"))[0]
    assert [r.result for r in side.run(0, -1, conv.ground_truth[0])] == [r.result
                                                                        for r in records]


def test_a_planted_link_is_not_followed(private_cache: Path, tmp_path: Path) -> None:
    _load()
    path = _entry_path(private_cache)
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(path.read_bytes())  # a valid entry, reached through a link
    path.unlink()
    path.symlink_to(target)
    s = _stats()
    _load()
    assert _stats()["recorded"] > s["recorded"]  # not read through the link
    assert not path.is_symlink() and path.is_file()  # the link itself was replaced
    assert target.read_bytes()[:8] == refcache.MAGIC  # the target untouched


def test_files_of_other_versions_left_for_a_week_are_removed(private_cache: Path,
                                                               tmp_path: Path) -> None:
    """An upgrade leaves the files of the engine versions before it: a write removes those
    nothing has written for a week (a link itself, never its target), and keeps a recent one
    (another install may still use it), every file of this version however old (another
    category's, here), and anything not named as a cache file."""
    import os
    import time

    private_cache.mkdir(parents=True, exist_ok=True)
    mine = refcache.replay_code_hash()
    stale = private_cache / f"{CATEGORY}-{'a' * 24}-{'b' * 24}.bin"
    other = private_cache / f"multi_turn_long_context-{'c' * 24}-{'d' * 24}.bin"
    recent = private_cache / f"{CATEGORY}-{'e' * 24}-{'f' * 24}.bin"
    current_other = private_cache / f"multi_turn_miss_func-{'0' * 24}-{mine}.bin"
    notes = private_cache / "notes.bin"
    target = tmp_path / "target.bin"
    link = private_cache / f"{CATEGORY}-{'1' * 24}-{'2' * 24}.bin"
    for p in (stale, other, recent, current_other, notes, target):
        p.write_bytes(b"x")
    link.symlink_to(target)
    old = time.time() - 8 * 24 * 3600  # (a week and a day)
    for p in (stale, other, current_other, notes):
        os.utime(p, (old, old))
    os.utime(link, (old, old), follow_symlinks=False)
    _load()
    assert _entry_path(private_cache).is_file()
    assert not stale.exists() and not other.exists() and not link.is_symlink()
    assert recent.exists() and current_other.exists() and notes.exists()
    assert target.read_bytes() == b"x"


def test_a_key_file_not_private_turns_the_disk_cache_off(private_cache: Path) -> None:
    _load()
    key = private_cache / "key"
    key.chmod(0o644)
    s = _stats()
    _load()
    assert _stats()["recorded"] > s["recorded"] and _stats()["loaded"] == s["loaded"]
    assert _stats()["written"] == s["written"]


def test_cache_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAREFUL_REFCACHE", "off")
    conv = next(c for c in bfcl.conversations(CATEGORY) if not refcache.depends_on_process(c))
    assert refcache.reference_side(conv, "m", True, None, None) is None


def test_cache_location_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CAREFUL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert refcache.cache_root() == tmp_path / "xdg" / "careful"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert refcache.cache_root() == Path.home() / ".cache" / "careful"
    assert json.loads(json.dumps(refcache.describe()))["enabled"] in (True, False)


def _categories(lines: bytes) -> set[str]:
    return {json.loads(line)["category"] for line in lines.splitlines()}


def test_workers_recording_at_once_lose_no_entry(private_cache: Path, shared_runs: Path) -> None:
    """Two workers scoring parts of the same files with an empty cache each write what they
    recorded when they exit, under the cache folder's lock: the files hold what one process
    recording everything writes."""
    from careful_engine.scoring.score import score_run

    run = shared_runs / "xlam-2-8b-fc-r"
    score_run(run, jobs=2)
    refcache.clear_memory()
    two = {f.name: disk._read(f, disk._key_file(private_cache), f.name.split("-")[0])
           for f in sorted(private_cache.glob("*.bin"))}
    for f in private_cache.glob("*.bin"):
        f.unlink()
    score_run(run, jobs=1)
    refcache.clear_memory()
    one = {f.name: disk._read(f, disk._key_file(private_cache), f.name.split("-")[0])
           for f in sorted(private_cache.glob("*.bin"))}
    assert len(one) == 3 and all(one.values())
    assert {k: sorted(v) for k, v in two.items()} == {k: sorted(v) for k, v in one.items()}


def test_one_name_one_meaning() -> None:
    """engine_version is the package's version (scoring.settings); the hash of the replay code
    is replay_code_hash; shown rounds a figure (core.figures), shown_path shows a path."""
    from careful_engine.core.refcache import scope
    from workbench.widgets import shared

    assert not hasattr(refcache, "engine_version") and not hasattr(scope, "engine_version")
    assert not hasattr(shared, "shown") and callable(shared.shown_path)
