"""``python -m careful_engine.browse score RUN --model M --out FILE``."""

import sys

from .score import main

sys.exit(main())
