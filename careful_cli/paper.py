"""The paper's six boundaries (``declarations/boundary/paper-*.json``) regenerated from its label
sets through the CLI itself (``careful labels import`` and ``careful adjudicate``), so the
committed boundaries are exactly what the commands write.

    python -m careful_cli.paper [OUT]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.paper_labels import BOUNDARIES, adjudicate_commands, release_dir


def regenerate_boundaries(out_dir: Path, label_dir: Path | None = None,
                          db: Path | None = None) -> list[Path]:
    """Write the six boundaries into ``out_dir`` from the label sets, through the CLI."""
    _load()
    runner = CliRunner()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmds = adjudicate_commands(label_dir or release_dir(), out_dir,
                                   db or Path(tmp) / "paper.db")
        for cmd in cmds:
            res = runner.invoke(app, cmd)
            if res.exit_code != 0:
                raise RuntimeError(f"careful {' '.join(cmd)}: exit {res.exit_code}\n"
                                   f"{res.output}")
    return [out_dir / f"{n}.json" for n in BOUNDARIES]


if __name__ == "__main__":  # pragma: no cover
    for path in regenerate_boundaries(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")):
        print(f"wrote {path}")
