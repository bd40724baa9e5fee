"""Two real vLLM replicas and laneway gateways in front of them, for test_real_vllm.py.

The replicas come from `scripts/real-vllm.sh serve --kv-events` (two replicas, one core each,
the random-weight `tiny` model, publishing their KV-cache events), started once per session
and stopped at its end; or, with
`LANEWAY_REAL_REPLICAS=http://127.0.0.1:P1,http://127.0.0.1:P2`, ones already running (left
running; the replica-loss test kills the second only if the script started it, and
`scripts/real-vllm.sh serve` with the same ports brings it back). Each test starts its own
gateway (`$LANEWAY_BIN serve --config F`, ports picked by the OS) with the settings it needs.

Waiting is by polling with a deadline (`poll`), never by a fixed sleep; prompts are salted
per session and per test, so that no test inherits another's (or another run's) cache.
"""

import json
import os
import pathlib
import random
import re
import queue
import signal
import socket
import subprocess
import threading
import time
import uuid

import httpx
import pytest
from openai import OpenAI

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "real-vllm.sh"
VLLM_HOME = pathlib.Path(
    os.environ.get("LANEWAY_VLLM_HOME", pathlib.Path.home() / ".cache" / "laneway-vllm")
)
ENABLED = os.environ.get("LANEWAY_REAL_VLLM", "0") not in ("", "0")
SKIP_REASON = (
    "real vLLM contract tests are opt-in: run `scripts/real-vllm.sh setup`, then set "
    "LANEWAY_REAL_VLLM=1 (optionally LANEWAY_REAL_REPLICAS=URL1,URL2 to reuse running replicas)"
)
SERVED_MODEL = "tiny"
LONG_THRESHOLD = 512  # short_threshold_tokens of the test gateways: above it, the long entry
ADMIN_TOKEN = "real-vllm-contract-token"
IGNORE_EOS = {"ignore_eos": True}  # random weights: exact output lengths need it
SESSION_SALT = uuid.uuid4().hex[:10]
SERVE_TIMEOUT_S = 420
GATEWAY_START_S = 30.0
# Each is one token in the test model's tokenizer (with its leading space), and about one in
# the gateway's estimate (4 bytes a token), so N words make a prompt of about N tokens.
WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an each "
    "which she do how their if will up other about out many then them these so some her "
    "would make like him into time has look two more write go see number no way could people"
).split()


def salted_text(words: int, tag: str) -> str:
    """About `words` tokens of text, the same for the same tag within a session only."""
    rng = random.Random(f"{SESSION_SALT}-{tag}")
    return f"[{SESSION_SALT} {tag}] " + " ".join(rng.choice(WORDS) for _ in range(words))


def poll(check, timeout_s: float, what: str, interval_s: float = 0.05):
    """Calls `check()` until it returns something truthy; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")
        time.sleep(interval_s)


# --- Prometheus text ---------------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list:
    """[(name, {label: value}, float)] for every sample line."""
    samples = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(LABEL.findall(match.group(2) or ""))
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def metric(samples: list, name: str, **labels) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    return sum(
        value
        for sample, sample_labels, value in samples
        if sample == name and all(sample_labels.get(k) == v for k, v in labels.items())
    )


def has_metric(samples: list, name: str, **labels) -> bool:
    return any(
        sample == name and all(sample_labels.get(k) == v for k, v in labels.items())
        for sample, sample_labels, _ in samples
    )


# --- replicas ----------------------------------------------------------------------------


class Replica:
    """One real vLLM replica: its gateway name, URL and (if the script started it) pid file."""

    def __init__(self, name: str, url: str):
        self.name = name
        self.url = url.rstrip("/")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.pid_file = VLLM_HOME / "run" / f"replica-{self.port}.pid"

    def metrics(self) -> list:
        response = httpx.get(f"{self.url}/metrics", timeout=10)
        response.raise_for_status()
        return parse_metrics(response.text)

    def engine(self, name: str) -> float:
        """A vLLM metric of this replica, summed over its labels (`engine`, `model_name`)."""
        return metric(self.metrics(), name)

    def kill(self) -> None:
        """SIGKILL to the replica's process group (API server, engine core, workers)."""
        os.killpg(int(self.pid_file.read_text().strip()), signal.SIGKILL)


def free_port_pair() -> int:
    """A port P such that P and P+1 are both free now."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two consecutive free ports")


@pytest.fixture(scope="session")
def replicas():
    given = os.environ.get("LANEWAY_REAL_REPLICAS", "").strip()
    started = []
    if given:
        urls = [url for url in given.split(",") if url]
        assert len(urls) == 2, "LANEWAY_REAL_REPLICAS needs two URLs"
    else:
        base = free_port_pair()
        cores = "0,1" if (os.cpu_count() or 1) >= 2 else "0,0"
        started = [base, base + 1]
        subprocess.run(
            [
                "bash", str(SCRIPT), "serve", "--replicas", "2", "--base-port", str(base),
                "--cores", cores, "--kv-events",
            ],
            check=True,
            timeout=SERVE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        urls = [f"http://127.0.0.1:{port}" for port in started]
    try:
        yield [Replica(f"real-{i}", url) for i, url in enumerate(urls)]
    finally:
        if started:
            subprocess.run(
                ["bash", str(SCRIPT), "stop", "--ports", ",".join(map(str, started))],
                check=True,
                timeout=120,
                stdin=subprocess.DEVNULL,
            )


# --- gateways ----------------------------------------------------------------------------


def laneway_bin() -> str:
    return os.environ.get("LANEWAY_BIN", str(ROOT / "target" / "debug" / "laneway"))


def gateway_config(replicas, policy: str, unknown: str, kv_events: bool = False) -> str:
    lines = [
        'listen = "127.0.0.1:0"',
        'admin_listen = "127.0.0.1:0"',
        f'policy = "{policy}"',
        "[classifier]",
        f"short_threshold_tokens = {LONG_THRESHOLD}",
        "[entries.debug]",
        "smart_listener = true",
        # Quick health checks, so that a stopped replica is seen out of rotation soon.
        "[health]",
        "interval_ms = 250",
        "timeout_ms = 1000",
        # vLLM's CPU backend caches prompts in blocks of 128 tokens.
        "[prefix]",
        "block_size = 128",
    ]
    if kv_events:
        # The engine's own tokens (its tokenizer and chat template), hashed as its events are.
        tokenizer = VLLM_HOME / "models" / SERVED_MODEL
        lines += [f'tokenizers = {{ {SERVED_MODEL} = "{tokenizer}" }}', "[kv_events]", "discover = true"]
    lines += [
        "[models]",
        f'unknown = "{unknown}"',
        "[admin]",
        f'token = "{ADMIN_TOKEN}"',
    ]
    for replica in replicas:
        lines += ["[[replicas]]", f'name = "{replica.name}"', f'url = "{replica.url}"']
    return "\n".join(lines) + "\n"


class Gateway:
    """A running `laneway serve`: its inference URL, admin URL and an OpenAI client."""

    def __init__(self, url: str, admin: str, process):
        self.url = url
        self.admin = admin
        self.process = process
        self.client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)

    def metrics(self) -> list:
        response = httpx.get(f"{self.admin}/metrics", timeout=10)
        response.raise_for_status()
        return parse_metrics(response.text)

    def replicas(self) -> dict:
        response = httpx.get(f"{self.admin}/admin/replicas", timeout=10)
        response.raise_for_status()
        return {replica["name"]: replica for replica in response.json()["replicas"]}

    def admin_post(self, path: str) -> httpx.Response:
        return httpx.post(
            f"{self.admin}{path}", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10
        )

    def model_ids(self) -> list:
        response = httpx.get(f"{self.url}/v1/models", timeout=10)
        response.raise_for_status()
        return [model["id"] for model in response.json()["data"]]


def stdout_lines(process) -> queue.Queue:
    """The process's stdout lines, read on a thread (which also keeps the pipe drained)."""
    lines = queue.Queue()

    def read():
        for line in process.stdout:
            lines.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    return lines


def next_line(lines: queue.Queue, process, deadline: float) -> str:
    while time.monotonic() < deadline:
        try:
            return lines.get(timeout=0.1)
        except queue.Empty:
            if process.poll() is not None:
                raise RuntimeError(f"laneway exited with {process.returncode}") from None
    raise RuntimeError("laneway did not print its addresses in time")


@pytest.fixture
def gateway(replicas, tmp_path):
    """`start(policy=..., unknown=..., kv_events=...) -> Gateway`; every gateway is killed at
    teardown."""
    processes = []

    def start(policy: str = "predicted_latency", unknown: str = "any", kv_events: bool = False) -> Gateway:
        config = tmp_path / f"laneway-{len(processes)}.toml"
        config.write_text(gateway_config(replicas, policy, unknown, kv_events))
        process = subprocess.Popen(
            [laneway_bin(), "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        processes.append(process)
        deadline = time.monotonic() + GATEWAY_START_S
        lines = stdout_lines(process)
        first, second = next_line(lines, process, deadline), next_line(lines, process, deadline)
        assert first.startswith("listening on "), first
        assert second.startswith("admin (metrics, health) on "), second
        gw = Gateway(first[len("listening on "):], second.rsplit(" ", 1)[1], process)
        # Ready once every replica's /metrics has been read: reported figures are live.
        poll(
            lambda: all(r["scrape_age_seconds"] is not None for r in gw.replicas().values()),
            10,
            "first scrape of every replica",
        )
        return gw

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def chat_body(content: str, max_tokens: int, stream: bool, **extra) -> dict:
    body = {
        "model": SERVED_MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
        **IGNORE_EOS,
        **extra,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def sse_events(lines) -> list:
    """The JSON events of an SSE body (`data: {...}`), then `[DONE]` as the string."""
    events = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events
