"""Snapshots of bfcl's file system that cost what a call changed, not what the tree holds.

A :class:`TreeTracker` follows one GorillaFileSystem instance. Before a call it works out from
the method and its arguments which entries the call can change (every writing method of
bfcl-eval 2026.3.23 changes only named entries of the current directory, or one named entry
inside a named subdirectory: :data:`ENTRY_PARAMS`), records their plain form, runs nothing
itself, and after the call records the new plain form of the same entries. The differences
form one *group* of operations in an append-only :class:`TreeLog`; a snapshot is a
:class:`TreeVersion` (the log and how many groups it includes), so consecutive snapshots
share everything the call did not change and cost O(changed entries) to take.

bfcl's ``cp`` of a directory shares the children (``contents.copy()``) and ``mv`` shares the
``contents`` dict itself, so one object can sit at several paths of the tree; the tracker keeps
an index from every ``contents`` dict and file object to its paths, and a change to a shared
object is recorded at every path it has. A method the table does not know is captured in full.

Every walk is iterative and bounded by the budget's tree limits (entries and depth), so a
deep tree never hits a recursion limit and a tree that doubles or contains itself stops the
conversation (:class:`~careful_engine.core.budget.BudgetExceeded`) instead of the machine.

Equality of snapshots: each version carries a hash of its content (a sum of per-entry hashes,
independent of insertion order, as dict equality is); equal content gives equal hashes, and
equal hashes are confirmed by comparing the materialised plain forms.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from careful_engine.core.budget import DEFAULT_BUDGET, Budget, BudgetExceeded

CLASS = "GorillaFileSystem"
_MASK = (1 << 64) - 1


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

READS = frozenset({"pwd", "ls", "cat", "find", "wc", "sort", "grep", "du", "tail", "diff"})
# methods that change named entries of the current directory: the parameters naming them
ENTRY_PARAMS = {
    "mkdir": ("dir_name",), "touch": ("file_name",), "echo": ("file_name",),
    "rm": ("file_name",), "rmdir": ("dir_name",),
}
MOVES = frozenset({"mv", "cp"})  # source -> destination (into it when it is a directory)


def is_dir(obj: Any) -> bool:
    return type(obj).__name__ == "Directory"


def is_file(obj: Any) -> bool:
    return type(obj).__name__ == "File"


def cwd_path(directory: Any) -> str:
    """The working directory's path, following parent links as bfcl's objects hold them."""
    parts = []
    seen = 0
    while directory is not None and directory.parent is not None:
        parts.append(directory.name)
        directory = directory.parent
        seen += 1
        if seen > 1_000_000:  # a parent cycle cannot be built by calls; never loop forever
            break
    return "/" + "/".join(str(p) for p in reversed(parts))


def _content_hash(content: Any) -> int:
    try:
        return hash(content)
    except TypeError:  # an unhashable file content (a list a model wrote): equal ones collide
        return hash(type(content).__name__)


def entry_hash(path: tuple, obj_is_dir: bool, content: Any = None) -> int:
    return hash((path, "d")) if obj_is_dir else hash((path, "f", _content_hash(content)))


class Walk:
    """The plain form of one entry's subtree, with its hash, size and object index."""

    __slots__ = ("plain", "hash", "count", "objects")

    def __init__(self, plain: Any, h: int, count: int, objects: list) -> None:
        self.plain, self.hash, self.count, self.objects = plain, h, count, objects


def walk(obj: Any, path: tuple, budget: Budget, room: int) -> Walk:
    """Iteratively walk the entry ``obj`` at ``path`` (names from the root).

    Raises BudgetExceeded past ``room`` entries or the depth limit. ``objects`` lists
    (key object, path) for every ``contents`` dict and file object, for the alias index.
    """
    if obj is MISSING:
        return Walk(MISSING, 0, 0, [])
    if is_file(obj) and room >= 1 and len(path) <= budget.max_tree_depth:  # the usual case
        return Walk({"__file__": obj.content}, entry_hash(path, False, obj.content) & _MASK, 1,
                    [(obj, path)])
    objects: list = []
    h = count = 0
    depth_limit = budget.max_tree_depth

    def leaf(o: Any, p: tuple) -> Any:
        nonlocal h, count
        count += 1
        if count > room:
            raise BudgetExceeded(
                f"the file system tree would hold more than {budget.max_tree_entries:,} entries "
                "(counted as bfcl's walks see it; a directory copied into itself or copies "
                "of copies grow it without bound)")
        if len(p) > depth_limit:
            raise BudgetExceeded(f"the file system tree would be deeper than {depth_limit:,} "
                                 "directories")
        if is_dir(o):
            h = (h + entry_hash(p, True)) & _MASK
            objects.append((o.contents, p))
            return None
        if is_file(o):
            h = (h + entry_hash(p, False, o.content)) & _MASK
            objects.append((o, p))
            return {"__file__": o.content}
        # anything else a model managed to store; deferred: state imports this module
        from careful_engine.core.state import to_plain

        h = (h + hash((p, "o", repr(o)[:200]))) & _MASK
        return to_plain(o, limit=room)

    root_plain = leaf(obj, path)
    if root_plain is not None:
        return Walk(root_plain, h, count, objects)
    top: dict = {}
    root_plain = {"__dir__": top}
    stack = [(obj, path, top)]
    while stack:
        d, p, out = stack.pop()
        for name, child in d.contents.items():
            cp = p + (name,)
            value = leaf(child, cp)
            if value is None:
                sub: dict = {}
                out[name] = {"__dir__": sub}
                stack.append((child, cp, sub))
            else:
                out[name] = value
    return Walk(root_plain, h, count, objects)


def plain_path(names: tuple) -> tuple:
    """The path of an entry inside the class's plain snapshot."""
    out: list = ["root"]
    for n in names:
        out += ["__dir__", n]
    return tuple(out)


# The versions' keys come from hash(), which differs between processes (PYTHONHASHSEED):
# keys are comparable only between logs made under the same salt. A log read back from the
# reference cache keeps the salt of the process that recorded it (None: unknown).
SALT = hash(("careful_engine.core.fs_capture", "key salt"))


class TreeLog:
    """The groups of changes made to one file system since a full capture (``base``)."""

    __slots__ = ("base", "groups", "salt", "_base_plain", "_last", "__weakref__")

    def __init__(self, base: bytes, salt: int | None = SALT) -> None:
        self.base = base
        self.salt = salt  # whose hash() made its versions' keys (see TreeVersion.same)
        self.groups: list[tuple] = []  # per call: ((names, old plain, new plain), ...)
        self._base_plain: dict | None = None
        self._last: tuple[int, dict] | None = None

    def materialise(self, index: int, cwd: str) -> dict[str, Any]:
        """The plain snapshot after ``index`` groups (copy-on-write: unchanged parts shared)."""
        if self._base_plain is None:
            from careful_engine.core.state import materialise

            self._base_plain = materialise(self.base)
        start, plain = 0, self._base_plain
        if self._last is not None and self._last[0] <= index:
            start, plain = self._last
        owned: set[int] = set()
        out = dict(plain)
        owned.add(id(out))
        for group in self.groups[start:index]:
            for names, _old, new in group:
                _apply(out, plain_path(names), new, owned)
        self._last = (index, out)
        result = dict(out)
        result["_current_dir"] = cwd
        return result


def _apply(root: dict, path: tuple, value: Any, owned: set[int]) -> None:
    """Set (or delete, for MISSING) ``path`` in ``root``, copying shared dicts on the way."""
    node = root
    for key in path[:-1]:
        child = node.get(key)
        if type(child) is not dict:
            return  # cannot happen for consistent logs; never raise while materialising
        if id(child) not in owned:
            child = dict(child)
            owned.add(id(child))
            node[key] = child
        node = child
    if value is MISSING:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


class TreeVersion:
    """A file-system snapshot: ``index`` groups of ``log``, the working directory, a hash."""

    __slots__ = ("log", "index", "cwd", "key")

    def __init__(self, log: TreeLog, index: int, cwd: str, key: int) -> None:
        self.log, self.index, self.cwd, self.key = log, index, cwd, key

    def materialise(self) -> dict[str, Any]:
        return self.log.materialise(self.index, self.cwd)

    def same(self, other: TreeVersion) -> bool:
        """Equal content (hash first where both keys come from one process's hash(), then
        the plain forms)."""
        if self is other or (self.log is other.log and self.index == other.index
                             and self.cwd == other.cwd):
            return True
        if self.key != other.key and self.log.salt == other.log.salt \
                and self.log.salt is not None:
            return False
        return self.materialise() == other.materialise()

    def __eq__(self, other: object) -> bool:
        """The same version of the same log (as bytes captures, equal content may differ:
        callers digest the plain form in its insertion order; :meth:`same` compares content)."""
        return (isinstance(other, TreeVersion) and self.log is other.log
                and self.index == other.index and self.cwd == other.cwd)

    def __hash__(self) -> int:
        return hash((id(self.log), self.index, self.cwd))

    def changes_since(self, before: TreeVersion) -> Iterator[tuple[tuple, Any, Any]] | None:
        """(plain path, old, new) per changed entry when ``before`` is this version's
        predecessor in the same log; None otherwise."""
        if before.log is not self.log or before.index > self.index or \
                self.index - before.index > 1:
            return None
        if self.index > before.index and len(self.log.groups[before.index]) > 1:
            return None  # several entries (mv, cp, shared objects): the full diff's order

        def gen() -> Iterator[tuple[tuple, Any, Any]]:
            if self.index > before.index:
                for names, old, new in self.log.groups[before.index]:
                    yield plain_path(names), old, new
            if self.cwd != before.cwd:
                yield ("_current_dir",), before.cwd, self.cwd

        return gen()


def _bind_names(method: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(method).parameters)


_PARAMS: dict[str, tuple[str, ...]] = {}


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


_BASES: dict[bytes, tuple[int, int]] = {}  # full capture -> (tree hash, entries), per process


class TreeTracker:
    """Incremental snapshots of one GorillaFileSystem instance (see the module docstring).

    Until a directory is copied or moved, every directory sits at one path, the one its
    parent links spell, and no index is needed; the first such call builds the alias index
    from the live tree (before the call runs) and it is kept up to date from then on.
    """

    def __init__(self, instance: Any, base: bytes, budget: Budget | None = None,
                 fresh: bool = False) -> None:
        """``fresh``: the instance is as its scenario loaded it (no directory shared yet)."""
        self.fs = instance
        self.budget = budget or DEFAULT_BUDGET
        self.log = TreeLog(base)
        self.index: dict[int, list] | None = None  # id(contents/file) -> [object, {paths}]
        known = _BASES.get(base)
        if known is None:
            w = walk(self.fs.root, (), self.budget, self.budget.max_tree_entries + 1)
            # the root itself is not an entry of the tree
            known = ((w.hash - entry_hash((), True)) & _MASK, w.count - 1)
            if len(_BASES) < 4096:
                _BASES[base] = known
        self.hash, self.count = known
        self._cwd_obj = self.fs._current_dir
        self.cwd = cwd_path(self._cwd_obj)
        self.version = TreeVersion(self.log, 0, self.cwd, self._key())
        if not fresh:
            self._build_index()

    def _build_index(self) -> None:
        w = walk(self.fs.root, (), self.budget, self.budget.max_tree_entries + 1)
        self.index = {}
        self._index_add(w.objects)

    def _key(self) -> int:
        return hash((self.hash, self.cwd))

    def _index_add(self, objects: list) -> None:
        if self.index is None:
            return
        for obj, path in objects:
            slot = self.index.get(id(obj))
            if slot is None:
                self.index[id(obj)] = [obj, {path}]
            else:
                slot[1].add(path)

    def _index_remove(self, objects: list) -> None:
        if self.index is None:
            return
        for obj, path in objects:
            slot = self.index.get(id(obj))
            if slot is not None:
                slot[1].discard(path)
                if not slot[1]:
                    del self.index[id(obj)]

    def _paths(self, obj: Any) -> set[tuple] | None:
        if self.index is None:
            return None
        slot = self.index.get(id(obj))
        return slot[1] if slot is not None and slot[0] is obj else None

    def _cwd_names(self) -> tuple:
        parts = []
        d = self.fs._current_dir
        while d is not None and d.parent is not None:
            parts.append(d.name)
            d = d.parent
        return tuple(reversed(parts))

    def _entry(self, names: tuple) -> Any:
        node = self.fs.root
        for n in names:
            if not is_dir(node):
                return MISSING
            node = node.contents.get(n, MISSING)
            if node is MISSING:
                return MISSING
        return node

    def plan(self, name: str, args: tuple, kwargs: dict) -> list[tuple] | None:
        """The entry paths a call can change (names from the root); [] for reads and ``cd``;
        None when the change cannot be predicted (capture in full)."""
        if name in READS or name == "cd":
            return []
        if name not in ENTRY_PARAMS and name not in MOVES:
            return None
        params = _PARAMS.get(name)
        if params is None:
            params = _PARAMS[name] = _bind_names(getattr(self.fs, name))
        bound = dict(zip(params, args, strict=False))
        bound.update(kwargs)
        cwd = self.fs._current_dir
        contents = cwd.contents
        touches: list[tuple[dict, Any]] = []
        dst = None
        if name in ENTRY_PARAMS:
            for p in ENTRY_PARAMS[name]:
                if p in bound and _hashable(bound[p]):
                    touches.append((contents, bound[p]))
        else:
            src, dst = bound.get("source"), bound.get("destination")
            if not (_hashable(src) and _hashable(dst)):
                return []  # ``in`` raises TypeError: nothing changes
            if self.index is None and is_dir(contents.get(src)):
                self._build_index()  # the call may share a directory's children
            if name == "mv":
                touches.append((contents, src))
            target = contents.get(dst) if src in contents else None
            if is_dir(target):
                touches.append((target.contents, src))
            else:
                touches.append((contents, dst))
        paths: set[tuple] = set()
        if self.index is None:  # no directory shared: the cwd's own path, nothing else
            here = self._cwd_names()
            for d, key in touches:
                paths.add((here if d is contents else here + (dst,)) + (key,))
            return list(paths) if len(paths) < 2 else [
                p for p in paths if not any(p[:i] in paths for i in range(len(p)))]
        for d, key in touches:
            where = self._paths(d)
            if where is None:
                return None  # a directory outside the indexed tree: capture in full
            paths.update(p + (key,) for p in where)
            item = d.get(key)
            if is_file(item):
                paths.update(self._paths(item) or ())
        if len(paths) < 2:
            return list(paths)
        # an entry under another changed entry is recorded with it
        return [p for p in paths if not any(p[:i] in paths for i in range(len(p)))]

    def before(self, paths: list[tuple]) -> list[tuple[tuple, Walk]]:
        room = self.budget.max_tree_entries + 1
        return [(p, walk(self._entry(p), p, self.budget, room)) for p in paths]

    def after(self, olds: list[tuple[tuple, Walk]]) -> TreeVersion:
        """Record what the call changed; the new version (the same one when nothing did)."""
        group = []
        for p, old in olds:
            room = self.budget.max_tree_entries - self.count + old.count
            new = walk(self._entry(p), p, self.budget, room)
            self._index_remove(old.objects)
            self._index_add(new.objects)
            self.count += new.count - old.count
            self.hash = (self.hash + new.hash - old.hash) & _MASK
            if old.plain is MISSING and new.plain is MISSING:
                continue
            if old.plain is MISSING or new.plain is MISSING or old.plain != new.plain:
                group.append((p, old.plain, new.plain))
        if self.fs._current_dir is not self._cwd_obj:  # only cd moves it; names never change
            self._cwd_obj = self.fs._current_dir
            cwd = cwd_path(self._cwd_obj)
        else:
            cwd = self.cwd
        if not group and cwd == self.cwd:
            return self.version
        self.cwd = cwd
        if group:
            self.log.groups.append(tuple(group))
        self.version = TreeVersion(self.log, len(self.log.groups), cwd, self._key())
        return self.version
