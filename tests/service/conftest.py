"""One dev stack (the broker and the five services as processes) for the package's
tests that throw requests at every method of every service."""

from collections.abc import Iterator

import pytest

from remotelog.dev.stack import DevConfig, DevStack


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    with DevStack(DevConfig(tmp_path_factory.mktemp("stack"), mode="simulated")) as running:
        yield running
