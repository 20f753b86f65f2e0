"""The CAREFUL workbench: a Textual app over careful_engine (``careful workbench``)."""
