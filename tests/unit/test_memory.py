"""The services keep freed buffers for reuse: glibc takes both thresholds."""

import gc
import platform

import pytest

from remotelog.rpc import memory


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
