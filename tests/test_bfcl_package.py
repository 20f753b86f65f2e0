"""The bfcl boundary package: its parts are reachable under one name, and the process helpers
that replaced the module-level ones work on bfcl's real data."""

from __future__ import annotations

import types

from careful_engine.analysis.provenance import drift
from careful_engine.core import bfcl, process


def test_package_names_are_its_submodules_names():
    """The package defines nothing of its own: each public name is a submodule's object, and
    ``__all__`` lists exactly the public names."""
    from careful_engine.core.bfcl import dataset, handlers, loops, secure, simulators

    parts = (dataset, handlers, loops, secure, simulators)
    public = {n for n, v in vars(bfcl).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set(bfcl.__all__)
    for name in bfcl.__all__:
        assert any(vars(m).get(name, m) is getattr(bfcl, name) for m in parts), name


def test_pristine_travel_extensions_survive_a_changed_live_copy():
    """A long-context TravelAPI conversation mutates the module-level cards; the pristine copy
    (what provenance compares a logged initial state with) is unaffected and a fresh copy."""
    live = bfcl.simulator_class("TravelAPI")  # noqa: F841  (imports the live module)
    cards = process.pristine_module_object("TravelAPI", "CREDIT_CARD_EXTENSION")
    assert cards  # bfcl's long-context data holds cards
    cards.clear()
    assert process.pristine_module_object("TravelAPI", "CREDIT_CARD_EXTENSION")
    keys_cards, keys_bookings = drift._extension_keys()
    assert keys_cards and keys_bookings
