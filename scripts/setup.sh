#!/usr/bin/env bash
# Create .venv and install careful-workbench, lean: no torch, CUDA, faiss or
# sentence-transformers. bfcl-eval declares those (for a category this project never runs),
# so it is installed with --no-deps and its needed dependencies come from
# requirements/runtime.txt, pinned by requirements/constraints.txt.
#
#   bash scripts/setup.sh          runtime only
#   bash scripts/setup.sh --test   plus the test tools and bfcl-eval's own evaluator deps
#   PYTHON=python3.12 bash scripts/setup.sh   choose the interpreter (>= 3.11)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

py="${PYTHON:-}"
if [ -z "$py" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then py="$candidate"; break; fi
  done
fi
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "setup.sh: Python >= 3.11 is required (found $("$py" --version 2>&1))" >&2; exit 2; }

[ -x .venv/bin/python ] || "$py" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q --no-deps "bfcl-eval==2026.3.23"
# bfcl-eval's own requirements are left out on purpose: pip's resolver would report each one
# as missing after every later install (--no-warn-conflicts keeps that false alarm off screen)
reqs=(-r requirements/runtime.txt)
[ "$want_test" = 1 ] && reqs+=(-r requirements/test.txt)
"${pip[@]}" install -q --no-warn-conflicts -c requirements/constraints.txt "${reqs[@]}"
# (PYTHONWARNINGS: setuptools' "Editable installation" banner, a warning about folders named
# as the package, which is what an editable install of this checkout is)
"${pip[@]}" install -q --no-warn-conflicts --no-deps --no-build-isolation -e . 2>/dev/null \
  || PYTHONWARNINGS=ignore "${pip[@]}" install -q --no-warn-conflicts --no-deps -e .
# An editable install has no bytecode, and PYTHONDONTWRITEBYTECODE (set on some machines) keeps
# Python from writing it, so every command would compile the project's modules again (about
# 0.2 s a start); pip compiles site-packages at install, this does the same for the project.
.venv/bin/python -m compileall -q careful_engine careful_cli workbench >/dev/null \
  || echo "setup.sh: could not write the project's bytecode (each command starts slower)" >&2
.venv/bin/python -m careful_engine.core.doctor
