"""What `remotelog scrub` and `remotelog recover` share: bad arguments are one line."""

import pytest

from remotelog.cli.main import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["scrub", "--older-than", "soon"], "scrub: --older-than: 'soon' is not a duration"),
        (["scrub", "--config", "/nonexistent/scrub.properties"], "scrub: --config"),
        (["recover", "--topic", "no/slashes"], "recover: --topic"),
        (["recover", "--config", "/nonexistent/recover.properties"], "recover: --config"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"remotelog: {message}")
    assert err.count("\n") == 1
    assert "Traceback" not in err
