"""The client's kept descriptors of stored logs (remotelog.client.short_circuit.Descriptors)."""

import os

from remotelog.client.short_circuit import Descriptors


def opened(path, data: bytes) -> int:
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


def test_a_kept_descriptor_reads_its_file_until_the_file_loses_its_name(tmp_path):
    kept = Descriptors()
    fd = opened(tmp_path / "a.log", b"abc")
    kept.keep("a", fd, 3)
    os.close(fd)  # the caller's own; the kept one stays open
    taken = kept.take("a")
    assert taken is not None
    assert os.pread(taken[0], 3, 0) == b"abc"
    assert taken[1] == 3
    os.close(taken[0])
    os.unlink(tmp_path / "a.log")
    assert kept.take("a") is None  # deleted: asked for anew
    assert kept.take("b") is None
    kept.close()


def test_the_oldest_and_the_idle_go_and_their_descriptors_close(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    kept = Descriptors(max_entries=2, idle_s=60)
    for name in "abc":
        fd = opened(tmp_path / name, name.encode())
        kept.keep(name, fd, 1)
        os.close(fd)
    assert kept.take("a") is None  # the oldest, over max_entries
    taken = kept.take("c")
    assert taken is not None
    os.close(taken[0])
    kept.idle_s = 0
    assert kept.take("b") is None  # idle
    assert kept.take("c") is None
    assert set(os.listdir("/proc/self/fd")) == before
