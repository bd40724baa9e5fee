"""Starts `laneway` processes for the Python compatibility tests.

`start_laneway(args)` runs `$LANEWAY_BIN <args>` (default `target/debug/laneway`), waits for
its first stdout line `listening on http://HOST:PORT` and returns the URL with the process;
the `launch_laneway` fixture does the same and kills every process it started at teardown,
so other tests (the gateway's) can reuse it with their own arguments.
"""

import os
import pathlib
import select
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTENING_PREFIX = "listening on "
START_TIMEOUT_S = 30.0


def laneway_bin() -> str:
    return os.environ.get("LANEWAY_BIN", str(ROOT / "target" / "debug" / "laneway"))


def start_laneway(args, timeout_s: float = START_TIMEOUT_S):
    """Starts `laneway <args>`; returns (url, process) once it prints its address."""
    process = subprocess.Popen(
        [laneway_bin(), *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline().strip()
            if line.startswith(LISTENING_PREFIX):
                return line[len(LISTENING_PREFIX):], process
            stop_laneway(process)
            raise RuntimeError(f"unexpected first line from laneway {args}: {line!r}")
        if process.poll() is not None:
            raise RuntimeError(f"laneway {args} exited with {process.returncode}")
    stop_laneway(process)
    raise RuntimeError(f"laneway {args} did not print its address in {timeout_s} s")


def stop_laneway(process) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


@pytest.fixture
def launch_laneway():
    """A function `start(args) -> url`; every process it starts is killed at teardown."""
    processes = []

    def start(args):
        url, process = start_laneway(args)
        processes.append(process)
        return url

    yield start
    for process in processes:
        stop_laneway(process)


@pytest.fixture
def sim_url(launch_laneway):
    """The URL of a fast `tiny` simulated replica."""
    return launch_laneway(["sim", "--port", "0", "--profile", "tiny", "--speed", "20"])
