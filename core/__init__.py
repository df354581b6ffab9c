"""The kernel both processes stand on: settings, database, run state, events, queue, specs.

Imports neither `app` nor `worker` (an import contract in tests/test_layout.py checks it).
"""
