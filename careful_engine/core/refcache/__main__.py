"""``python -m careful_engine.core.refcache``: where the cache is, what it holds."""

import json

from careful_engine.core.refcache.store import describe

print(json.dumps(describe(), indent=2))
