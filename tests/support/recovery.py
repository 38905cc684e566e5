"""`remotelog recover` run as an operator runs it, on a stack's store."""

import asyncio
import contextlib
import io

from remotelog.cli.main import main


async def run_recover(stack, *args: str, **settings: str) -> list[str]:
    """`remotelog recover` of `stack`'s store through its metadata manager (`settings`
    over its recover.properties, e.g. another manager's address): the lines it printed,
    once it exited 0."""
    stack.recover_config(**settings)
    config = str(stack.tmp / "recover.properties")
    lines: list[str] = []

    def run() -> int:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["recover", "--config", config, *args])
        lines.extend(out.getvalue().splitlines())
        return code

    assert await asyncio.to_thread(run) == 0, lines
    return lines
