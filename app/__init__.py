"""TRM trainer service: the API process (settings, database, routes, events, card, CLI).

Nothing under `app/` imports torch or transformers (SPEC §2): the API stays small.
"""

__version__ = "0.5.0"
