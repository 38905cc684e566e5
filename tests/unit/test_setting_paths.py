import re

import pytest

from remotelog.core.setting_paths import make_directory, read_file


def test_make_directory_creates_parents_and_accepts_an_existing_one(tmp_path):
    target = tmp_path / "a" / "b"
    make_directory(target, "storage.root")
    make_directory(target, "storage.root")
    assert target.is_dir()


def test_a_directory_that_cannot_be_made_names_its_setting(tmp_path):
    (tmp_path / "file").write_text("x")
    expected = f"remote.log.index.file.cache.dir: cannot create {tmp_path}/file/cache: Not a dir"
    with pytest.raises(OSError, match=re.escape(expected)):
        make_directory(tmp_path / "file" / "cache", "remote.log.index.file.cache.dir")


def test_read_file_names_its_setting(tmp_path):
    (tmp_path / "cert.pem").write_bytes(b"PEM")
    assert read_file(str(tmp_path / "cert.pem"), "tls.cert.file") == b"PEM"
    expected = f"tls.key.file: cannot read {tmp_path}/key.pem: No such file or directory"
    with pytest.raises(OSError, match=f"^{re.escape(expected)}$"):
        read_file(str(tmp_path / "key.pem"), "tls.key.file")
