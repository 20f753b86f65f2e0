"""``python -m careful_engine.browse score RUN --model M --out FILE``."""

import sys

from careful_engine.browse.score import main

sys.exit(main())
