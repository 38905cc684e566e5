"""The suite's own spread over xdist workers (support/scheduling.py): a module's tests
stay on one worker, so its module-scoped servers start once."""

import re
import subprocess
import sys
from pathlib import Path

from support.scheduling import SLOWEST_FIRST, group_of, rank_of

TESTS = Path(__file__).resolve().parents[1]


def test_a_module_is_a_group_but_spread_modules_and_together_folders():
    assert group_of("tests/fetch/test_fetch.py::test_offsets_of_every_kind") == (
        "tests/fetch/test_fetch.py"
    )
    assert group_of("tests/plugin/test_versions.py::test_one_jar[3.7.2]") == (
        "tests/plugin/test_versions.py::test_one_jar[3.7.2]"
    )
    assert group_of("tests/packaging/test_wheel.py::test_x") == "tests/packaging/"
    assert group_of("tests/packaging/test_installed.py::test_y") == "tests/packaging/"


def test_the_slowest_come_first_and_the_rest_after_them():
    assert rank_of("tests/plugin/test_spark_side_by_side.py") == 0
    first_jar = rank_of("tests/plugin/test_versions.py::test_one_jar_tiers[3.7.2]")
    assert first_jar == SLOWEST_FIRST.index("tests/plugin/test_versions.py::test_one_jar")
    assert rank_of("tests/unit/test_states.py") == len(SLOWEST_FIRST)


def test_two_workers_run_each_module_whole(tmp_path):
    """Against xdist itself: pytest 9.2 made its `loadgroup` marks group nothing."""
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        "from support.scheduling import GroupScheduling\n\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(GroupScheduling())\n"
    )
    for name in "abcd":
        (tmp_path / f"test_{name}.py").write_text(
            "import pytest\n\n@pytest.mark.parametrize('n', range(5))\ndef test_it(n):\n    pass\n"
        )
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2"]
    done = subprocess.run(
        [*command, "--dist", "loadscope", "--no-loadscope-reorder", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    ran = re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED (test_\w)\.py::test_it", done.stdout)
    assert len(ran) == 20
    workers = {module: {w for w, m in ran if m == module} for _, module in ran}
    assert all(len(found) == 1 for found in workers.values()), workers
    assert {w for w, _ in ran} == {"gw0", "gw1"}
