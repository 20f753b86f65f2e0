"""Check the installation: the pinned bfcl-eval, and none of the heavy stack it declares.

    python -m careful_engine.core.doctor
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

HEAVY = re.compile(r"^(torch|triton|nvidia[-_].*|faiss.*|sentence[-_]transformers)$", re.I)


def heavy_packages() -> list[str]:
    """Installed distributions from the torch / CUDA / faiss stack."""
    names = {(d.metadata["Name"] or "") for d in metadata.distributions()}
    return sorted(n for n in names if HEAVY.match(n))


def problems() -> list[str]:
    from careful_engine.core import bfcl

    out = []
    try:
        installed = bfcl.installed_version()
    except metadata.PackageNotFoundError:
        installed = None
    if installed != bfcl.BFCL_VERSION:
        out.append(f"bfcl-eval {installed} is installed; this project pins {bfcl.BFCL_VERSION}")
    heavy = heavy_packages()
    if heavy:
        out.append("heavy packages installed that the engine never uses: " + ", ".join(heavy))
    return out


def main() -> int:
    found = problems()
    for p in found:
        print(f"careful doctor: {p}", file=sys.stderr)
    if not found:
        from careful_engine.core import bfcl

        print(f"careful doctor: ok (bfcl-eval {bfcl.BFCL_VERSION}, lean install: no torch, "
              "CUDA, faiss or sentence-transformers)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
