"""`remotelog health`: exit 0 when SERVING, one line and 1 otherwise, 2 for a bad argument."""

import asyncio
import sys

import pytest
from support.services import start_store
from support.tls import make_certificates, server_tls_settings

from remotelog.cli.health import HEALTH_NAMES
from remotelog.cli.main import main
from remotelog.dev.broker import free_port


@pytest.mark.parametrize("service", ["", *HEALTH_NAMES])
def test_each_service_of_the_stack_is_serving(stack, capsys, service):
    address = stack.addresses[service or "segment-store"]
    assert main(["health", address, "--service", service]) == 0
    assert capsys.readouterr().out == f"{f'{address} {service}'.rstrip()}: SERVING\n"


def test_the_grpc_name_works_as_well(stack, capsys):
    address = stack.addresses["remote-fetch"]
    name = HEALTH_NAMES["remote-fetch"]
    assert main(["health", address, "--service", name]) == 0
    assert capsys.readouterr().out == f"{address} {name}: SERVING\n"


def test_another_services_name_is_not_served_there(stack, capsys):
    address = stack.addresses["segment-store"]
    assert main(["health", address, "--service", "remote-fetch"]) == 1
    name = HEALTH_NAMES["remote-fetch"]
    assert capsys.readouterr().out == f"{address} remote-fetch: no service named {name!r} here\n"


def test_nothing_listening_is_one_line_within_the_timeout(capsys):
    address = f"127.0.0.1:{free_port()}"
    assert main(["health", address, "--timeout", "0.5"]) == 1
    assert capsys.readouterr().out == f"{address}: no answer within 0.5 s\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["localhost"], "health: address 'localhost' is not host:port or unix:/path"),
        (["127.0.0.1:1", "--timeout", "0"], "--timeout 0.0 must be more than 0 seconds"),
        (["127.0.0.1:1", "--tls-cert-file", "c.pem"], "--tls-cert-file and --tls-key-file go"),
        (["127.0.0.1:1", "--tls-ca-file", "/nonexistent/ca.pem"], "/nonexistent/ca.pem: No such"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["health", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert len(captured.err.splitlines()) == 1
    assert captured.out == ""


async def health(*argv: str) -> tuple[int, str]:
    """The command as an operator runs it, beside this test's event loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "remotelog.cli.main",
        "health",
        *argv,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    return process.returncode, out.decode()


async def test_over_mutual_tls_with_and_without_a_client_certificate(tmp_path, s3_endpoint):
    certificates = make_certificates(tmp_path)
    running = await start_store(
        "filesystem", tmp_path, s3_endpoint, **server_tls_settings(certificates)
    )
    address = f"localhost:{running.service.port}"
    try:
        ca = ["--tls-ca-file", str(certificates.ca)]
        client = ["--tls-cert-file", str(certificates.client_cert)]
        client += ["--tls-key-file", str(certificates.client_key)]
        assert await health(address, "--service", "segment-store", *ca, *client) == (
            0,
            f"{address} segment-store: SERVING\n",
        )
        # Trusting the server is not enough: it wants a client certificate.
        code, out = await health(address, "--timeout", "2", *ca)
        assert code == 1
        assert out.startswith(f"{address}: ")
        assert "SERVING" not in out
    finally:
        await running.stop()
