"""``python -m careful_cli``: the ``careful`` command."""

from careful_cli import main

main()
