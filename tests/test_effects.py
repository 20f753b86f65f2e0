"""Units of careful_engine.effects: signals, footprints, call identity, probes, recorder."""

from __future__ import annotations

import random
from collections import Counter

from careful_engine.core import bfcl
from careful_engine.core.calls import Call, parse_call
from careful_engine.core.environment import Environment
from careful_engine.core.state import Change
from careful_engine.effects import infer, observe, probes
from careful_engine.effects import signals as sig


def _c(path: tuple, kind: str, before=None, after=None) -> Change:
    return Change(path, kind, before, after)


def test_third_party_message_to_another_user_only() -> None:
    before = [{"USR002": "hi"}]
    to_other = _c(("MessageAPI", "inbox"), "changed", before, before + [{"USR003": "x"}])
    to_self = _c(("MessageAPI", "inbox"), "changed", before, before + [{"USR001": "x"}])
    state = {"MessageAPI": {"current_user": "USR001"}}
    assert sig.detect([to_other], state) == {sig.THIRD_PARTY}
    assert sig.detect([to_self], state) == set()


def test_third_party_twitter_posts_comments_mentions() -> None:
    assert sig.THIRD_PARTY in sig.detect([_c(("TwitterAPI", "tweets", 3), "added", None, {})], {})
    grew = _c(("TwitterAPI", "tweets", 0, "mentions"), "changed", [], ["@bob"])
    assert sig.detect([grew], {}) == {sig.THIRD_PARTY}
    assert sig.detect([_c(("TwitterAPI", "following_list"), "changed", [], ["a"])], {}) == set()


def test_entries_removed_and_balance() -> None:
    removed = _c(("GorillaFileSystem", "root", "__dir__", "a.txt"), "removed", {"__file__": ""})
    shrunk = _c(("TradingBot", "watch_list"), "changed", ["A", "B"], ["A"])
    same_len = _c(("TicketAPI", "ticket_queue"), "changed", [{"s": 1}], [{"s": 2}])
    hidden = _c(("X", "_private", "k"), "removed", 1)
    assert sig.detect([removed], {}) == {sig.ENTRIES_REMOVED}
    assert sig.detect([shrunk], {}) == {sig.ENTRIES_REMOVED}
    assert sig.detect([same_len, hidden], {}) == set()
    bal = _c(("TravelAPI", "credit_card_list", "1234", "balance"), "changed", 100.0, 60.0)
    other = _c(("TravelAPI", "budget_limit"), "changed", 100.0, 60.0)
    assert sig.detect([bal, other], {}) == {sig.BALANCE_CHANGED}


def test_footprint_generalisation() -> None:
    added = {("TravelAPI", "booking_record", "abc")}
    ev = infer.Evidence()
    ev.added_or_removed |= added
    coll = ev.collections()
    assert ("TravelAPI", "booking_record") in coll
    g = infer.generalise(("TravelAPI", "booking_record", "abc", "travel_cost"), coll)
    assert infer.render_path(g) == "TravelAPI.booking_record[*].travel_cost"
    card = infer.generalise(("TravelAPI", "credit_card_list", "1234-5678", "balance"), set())
    assert infer.render_path(card) == "TravelAPI.credit_card_list[*].balance"
    field = infer.generalise(("VehicleControlAPI", "doorStatus", "driver"), set())
    assert infer.render_path(field) == "VehicleControlAPI.doorStatus.driver"
    tree = infer.shape(("GorillaFileSystem", "root", "__dir__", "w", "__dir__", "f"))
    assert infer.render_path(infer.generalise(tree, set())) == "GorillaFileSystem.root/**"
    assert infer.concrete_path(("GorillaFileSystem", "root", "__dir__", "w", "__dir__", "f")) \
        == "GorillaFileSystem.root:/w/f"


def test_normalise_binds_positional_arguments() -> None:
    names = frozenset(bfcl.function_class())
    a = parse_call("sort('report.pdf')", methods=names)
    b = parse_call("sort(file_name='report.pdf')", methods=names)
    assert isinstance(a, Call) and isinstance(b, Call)
    assert observe.normalise(a) == observe.normalise(b) == "sort(file_name='report.pdf')"
    unbound = Call("sort", (), {"nope": {"b", "a"}})
    assert observe.normalise(unbound) == "sort(nope={'a', 'b'})"  # sets sorted, never hashed


def _fs_conv() -> bfcl.Conversation:
    return next(c for c in bfcl.conversations("multi_turn_base")
                if "GorillaFileSystem" in c.involved_classes)


def test_fork_leaves_the_original_untouched() -> None:
    conv = _fs_conv()
    env = observe.environment(conv)
    before = env.state
    twin = observe.fork(env, "GorillaFileSystem")
    twin.execute("mkdir(dir_name='careful_probe_dir')")
    assert env.state is before
    assert env.state.same_as(observe.environment(conv).state, "GorillaFileSystem")
    assert not twin.state.same_as(env.state, "GorillaFileSystem")


def test_recorder_dedupes_and_rechecks_writes() -> None:
    seen: list[observe.Observation] = []
    rec = observe.Recorder(seen.append)
    conv = _fs_conv()
    counts: Counter = Counter()
    for _ in range(2):  # the same call from the same state is one observation
        env = observe.environment(conv)
        observe.run_call(rec, "references", "t", env, "mkdir(dir_name='careful_x')", counts)
    assert counts["calls"] == 2 and len(seen) == 1
    obs = seen[0]
    assert obs.success and obs.changes
    assert obs.repeat_changes == []  # mkdir again fails harmlessly: idempotent
    env = observe.environment(conv)
    observe.run_call(rec, "runs", "t", env, "no_such_function(a=1)", counts)
    observe.run_call(rec, "runs", "t", env, "ls(a=[x for x in y])", counts)
    assert counts["nonexistent_function_calls"] == 1 and counts["unparsed_calls"] == 1


def test_cd_dotdot_is_not_idempotent_but_a_named_child_is() -> None:
    seen: list[observe.Observation] = []
    rec = observe.Recorder(seen.append)
    env = observe.environment(_fs_conv())
    counts: Counter = Counter()
    for text in ("mkdir(dir_name='careful_a')", "cd(folder='careful_a')",
                 "mkdir(dir_name='careful_b')", "cd(folder='careful_b')", "cd(folder='..')"):
        observe.run_call(rec, "references", "t", env, text, counts)
    by_call = {o.call: o for o in seen}
    named = by_call["cd(folder='careful_a')"]
    assert named.success and all(c.hidden for c in named.changes)
    assert named.repeat_changes == []  # no careful_a inside careful_a: fails harmlessly
    dotdot = by_call["cd(folder='..')"]
    assert dotdot.repeat_changes and all(c.hidden for c in dotdot.repeat_changes)


def test_probe_sampling_is_seeded_and_bounded() -> None:
    for cls in bfcl.CLASSES:
        a = probes.sample_points(cls)
        b = probes.sample_points(cls)
        assert [(c.id, k) for c, k in a] == [(c.id, k) for c, k in b]
        assert 0 < len(a) <= probes.STATES_PER_CLASS
        assert all(cls in c.involved_classes and c.category == probes.PROBE_CATEGORY
                   for c, _ in a)


def test_synthesised_arguments_use_state_values_and_enums() -> None:
    pools = probes.Pools(["alice", "report.txt"], [7], [1.5])
    doc = bfcl.all_func_docs()["lockDoors"]
    args = probes.synthesise_arguments(doc, pools, random.Random("x"))
    assert set(args) >= {"unlock", "door"}
    assert set(args["door"]) <= {"driver", "passenger", "rear_left", "rear_right"}
    one = probes.synthesise_arguments(bfcl.all_func_docs()["cat"], pools, random.Random("y"))
    assert one["file_name"] in ("alice", "report.txt", *probes.GENERIC["string"])
    assert probes.doc_enum({"description": "Unit. [Enum]: USD, EUR"}) == ["USD", "EUR"]


def test_reference_arguments_cover_the_81_used_functions() -> None:
    refs = probes.reference_arguments()
    assert len(refs) == 81
    assert all(args for args in refs.values())


def test_state_pools_collect_keys_and_scalars() -> None:
    env = Environment.for_conversation(_fs_conv(), "model", model_name="careful_test")
    pools = probes.state_pools(env.state["GorillaFileSystem"])
    assert pools.strings and "__dir__" not in pools.strings
