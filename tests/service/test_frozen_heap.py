"""core/heap.py: a serving process's start-up objects are frozen out of full collections while it
serves, garbage is collected first rather than frozen with them, and everything is handed back
when it stops (a process that starts and stops many apps keeps nothing frozen)."""

from __future__ import annotations

import gc
import weakref

from core.heap import frozen_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_live_objects_are_frozen_while_serving_and_handed_back_after() -> None:
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    kept = Node()
    with frozen_heap():
        assert gone() is None  # collected, not frozen with the rest
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects(generation=2))  # out of the walk
        later = Node()
        later_ref = weakref.ref(later)
        del later
        gc.collect()
        assert later_ref() is None  # what is made while serving is collected as before
    assert gc.get_freeze_count() == 0
    assert any(o is kept for o in gc.get_objects())
    kept_ref = weakref.ref(kept)
    del kept
    gc.collect()
    assert kept_ref() is None  # unfrozen: a cycle left after the block is freed
