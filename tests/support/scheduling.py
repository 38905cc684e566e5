"""How `make test` spreads the suite over its workers (pytest-xdist, `--dist loadscope`).

Each group runs whole on one worker. A group is a module, so its module-scoped stack
starts once, except:
- the modules in SPREAD hold long tests that share nothing costly: each of their
  tests is a group of its own;
- each folder in TOGETHER shares a session fixture that takes a minute (the packaging
  tests' wheel): it is one group.

xdist hands the groups out in the order they are collected, so the longest are
collected first: one started last would run on alone while the other worker idles.
"""

from collections.abc import Sequence

import pytest

SPREAD = ("tests/plugin/test_versions.py", "tests/chaos/test_chaos.py")
TOGETHER = ("tests/packaging/",)

# The groups that take longest, longest first, as tests/README.md's measured run has
# them: a group takes the place of the first entry it starts with. Every other group
# follows, in its usual order.
SLOWEST_FIRST: Sequence[str] = (
    "tests/plugin/test_spark_side_by_side.py",
    "tests/scheduler/test_discovery.py",
    "tests/chaos/test_chaos.py::test_kafka_with_the_plugin",
    "tests/plugin/test_hung_services.py",
    "tests/plugin/test_kafka_tiers.py",
    "tests/chaos/test_chaos.py",
    "tests/dev/test_dev_command.py",
    "tests/packaging/",
    "tests/dev/test_demo.py",
    "tests/fetch/test_spark_source.py",
    "tests/plugin/test_object_storage.py",
    "tests/plugin/test_broker_rebuild.py",
    "tests/plugin/test_versions.py::test_kafkas_own_metadata_manager_beside",
    "tests/plugin/test_recovery.py",
    "tests/plugin/test_versions.py::test_one_jar",
    "tests/plugin/test_versions.py::test_switching",
    "tests/dev/test_restart.py",
    "tests/plugin/test_versions.py",
    "tests/fetch/test_tiered_consumer.py",
    "tests/segmentstore/test_contract.py",
    "tests/dev/test_kafka_broker.py",
    "tests/remover/test_recover.py",
    "tests/service/test_fuzz_rpcs.py",
    "tests/remover/test_remover.py",
    "tests/fetch/test_fetch.py",
    "tests/metadata/test_broker_outage.py",
    "tests/remover/test_scrub.py",
)


def group_of(nodeid: str) -> str:
    """The group a test (by its node id) runs in."""
    module = nodeid.split("::", 1)[0]
    if module in SPREAD:
        return nodeid
    return next((folder for folder in TOGETHER if module.startswith(folder)), module)


def rank_of(group: str) -> int:
    return next(
        (n for n, first in enumerate(SLOWEST_FIRST) if group.startswith(first)),
        len(SLOWEST_FIRST),
    )


def slowest_first(items: list[pytest.Item]) -> None:
    """Puts the slowest groups first, each group's tests and the rest in their order.
    Every worker collects the same items and sorts them alike, as xdist requires."""
    items.sort(key=lambda item: rank_of(group_of(item.nodeid)))


class GroupScheduling:
    """Registered where xdist runs: `--dist loadscope` by group_of."""

    @staticmethod
    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") != "loadscope":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class ByGroup(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

        return ByGroup(config, log)
