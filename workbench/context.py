"""What every screen shares: the settings and the engine objects built from them, lazily.

No Textual here: this is the app's state, testable without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from careful_engine.effects.boundary import DEFAULT_BOUNDARY

from .remember import Remembered, default_path

if TYPE_CHECKING:
    from careful_engine.annotation.store import Store
    from careful_engine.browse import RunBrowser, RunRef
    from careful_engine.effects.declarations import Declarations
    from careful_engine.scoring.rules import Effects


def _user() -> str:
    """The login that labels and adjudicates here: the same account the CLI names."""
    from careful_engine.annotation.sessions import current_account

    return current_account()


@dataclass
class Settings:
    """The workbench's inputs (``careful workbench`` fills them from its arguments)."""

    runs: list[Path]
    db: Path | None = None  # None: $CAREFUL_DB, else annotations/careful.db
    declarations: Path | None = None  # None: declarations/effects.json
    boundary: str = DEFAULT_BOUNDARY
    boundary_dir: Path | None = None  # where adjudicated boundaries go (None: the working folder)
    decoders: Any = None  # a careful_engine.scoring.decoders.DecoderChoice
    detector: str = "strict"
    user: str = field(default_factory=_user)
    cache_dir: Path | None = None  # where the workbench keeps scores it made itself
    # what it remembers across sessions (annotator name, filters); None: nothing
    config: Path | None = field(default_factory=default_path)
    jobs: int | None = None  # worker processes for background scoring (None: cores - 1)

    def scoring_jobs(self) -> int:
        """Worker processes for background scoring: ``jobs``, else one core fewer than this
        process may use (the screen keeps one), at least one."""
        if self.jobs is not None:
            return max(1, self.jobs)
        from careful_engine.core.parallel import default_jobs

        return max(1, default_jobs() - 1)


def default_runs(root: Path = Path("runs"), *, write_reference: bool = True) -> list[Path]:
    """``runs/*``; the embedded reference run is written first when it is missing."""
    if write_reference and not (root / "reference").exists():
        from careful_engine.demo import reference as demo

        demo.write_reference_run(root / "reference")
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


class Workbench:
    """The settings and the engine objects they name, each built on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._browsers: dict[str, RunBrowser] = {}
        # override reasons given on the Agreement screen, by round: asked once while the app
        # runs (each opening is still written to the round's reveal log)
        self.overrides: dict[str, str] = {}
        # run folders given more than once (listed once), --decoder FOLDER=KEY naming none
        self.run_notes: list[str] = []

    @cached_property
    def remembered(self) -> Remembered:
        """The annotator name and the filters per run, from the last session."""
        return Remembered.load(self.settings.config)

    @cached_property
    def refs(self) -> list[RunRef]:
        from careful_engine.browse import find_runs

        return find_runs(self.settings.runs, self.settings.decoders, self.run_notes)

    def ref(self, label: str) -> RunRef:
        return next(r for r in self.refs if r.label == label)

    def synthetic(self, ref: RunRef) -> bool:
        """Whether the run's manifest marks it synthetic (``careful demo``'s flawed run)."""
        from careful_engine.demo.reference import is_synthetic, model_folder

        return bool(ref.files) and is_synthetic(model_folder(ref.files[0].path))

    def browser(self, ref: RunRef) -> RunBrowser:
        from careful_engine.browse import RunBrowser

        if ref.label not in self._browsers:
            self._browsers[ref.label] = RunBrowser(
                ref, self.effects, detector=self.settings.detector,
                cache_dir=self.settings.cache_dir)
        return self._browsers[ref.label]

    @cached_property
    def store(self) -> Store:
        from careful_engine.annotation.store import Store

        return Store(self.settings.db)

    @cached_property
    def declarations(self) -> Declarations | None:
        from careful_engine.effects.declarations import DeclarationsError, load

        try:
            return load(self.settings.declarations)
        except DeclarationsError:
            return None

    @cached_property
    def effects(self) -> Effects | None:
        """Declarations and the boundary as the rules use them (None when they do not load:
        :attr:`effects_problem` says why)."""
        from careful_engine.scoring.score import load_effects

        try:
            return load_effects(self.settings.boundary, self.settings.declarations)
        except (ValueError, OSError) as e:
            self.effects_problem = str(e)
            return None

    effects_problem: str = "not found"  # why effects did not load (as the CLI says it)

    def declarations_for(self, source: str, sha256: str) -> Declarations | None:
        """The declarations a round was made from, when that exact file is still there."""
        from careful_engine.effects.declarations import DeclarationsError, load

        current = self.declarations
        if current is not None and current.sha256 == sha256:
            return current
        try:
            loaded = load(source)
        except (DeclarationsError, OSError):
            return None
        return loaded if loaded.sha256 == sha256 else None

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
