"""The services keep freed buffers for reuse: glibc takes both thresholds."""

import gc
import platform
import weakref

import pytest

from remotelog.process import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")
def test_glibc_takes_the_thresholds():
    assert memory.keep_freed_memory() is True


def test_without_a_c_library_nothing_is_done(monkeypatch):
    monkeypatch.setattr(memory.ctypes.util, "find_library", lambda name: None)
    assert memory.keep_freed_memory() is False


def test_startup_objects_are_frozen_and_new_garbage_is_still_collected():
    try:
        assert memory.freeze_startup_objects() > 1_000  # the interpreter's and the modules'
        ref: list[object] = []
        ref.append(ref)  # garbage only a collection can free
        count = len(gc.get_objects())
        del ref
        gc.collect()
        assert len(gc.get_objects()) < count
    finally:
        gc.unfreeze()


class Cycle:
    """Garbage only a collection can free: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def test_survivors_of_a_middle_collection_are_frozen_and_full_collections_skip_them():
    try:
        with memory.SurvivorFreezer():
            held = Cycle()
            gone = weakref.ref(held)
            gc.collect(1)  # `held` survives it: frozen
            assert gc.get_freeze_count() > 0
            del held
            gc.collect()
            assert gone() is not None  # a frozen cycle waits for a thaw
    finally:
        gc.unfreeze()
        gc.collect()
    assert gone() is None


def test_once_the_heap_has_grown_enough_a_thaw_lets_a_full_collection_reclaim_frozen_cycles():
    try:
        with memory.SurvivorFreezer(growth=0.0, floor_blocks=50_000) as freezer:
            held = Cycle()
            gone = weakref.ref(held)
            gc.collect(1)
            del held
            gc.collect()
            assert gone() is not None
            assert freezer.thaws == 0
            grown = [[n] for n in range(60_000)]  # more small blocks than the floor
            gc.collect(1)  # frozen again, then thawed: the heap grew past the floor
            assert freezer.thaws == 1
            gc.collect()  # the full collection after the thaw walks everything
            assert gone() is None
            assert gc.get_freeze_count() > len(grown)  # and then freezes what lives on
    finally:
        gc.unfreeze()


def test_a_thaw_comes_after_the_interval_however_little_the_heap_grew():
    try:
        with memory.SurvivorFreezer() as freezer:
            held = Cycle()
            gone = weakref.ref(held)
            gc.collect(1)  # frozen
            del held
            freezer.interval_s = 0.0  # as if ten minutes had passed
            gc.collect(1)
            assert freezer.thaws == 1
            gc.collect()
            assert gone() is None
    finally:
        gc.unfreeze()


def test_the_freezer_leaves_the_collector_as_it_found_it():
    before = list(gc.callbacks)
    with memory.SurvivorFreezer():
        assert len(gc.callbacks) == len(before) + 1
    assert gc.callbacks == before
