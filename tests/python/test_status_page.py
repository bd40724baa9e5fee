"""The admin status page in headless Chromium: `laneway serve` in front of two simulated
replicas with a two-variant canary, a little traffic, then the page as rendered after its
JavaScript ran (`--dump-dom`) must show the replica rows and a verdict, and a screenshot is
kept for a human to look at (`$LANEWAY_SCREENSHOT`, default in pytest's tmp_path)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request

import pytest

from conftest import start_laneway, stop_laneway

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=5000",
]
ADMIN_PREFIX = "admin (metrics, health) on "
REQUESTS = 20


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium installed (.ci/run installs it)")


def run_chromium(*args):
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture
def gateway(launch_laneway, tmp_path):
    """(smart URL, admin URL) of a gateway with variants `fc` and `ka` on two sims."""
    sims = [
        launch_laneway(["sim", "--port", "0", "--profile", "tiny", "--speed", "20", "--id", name])
        for name in ("sim-a", "sim-b")
    ]
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[[replicas]]
name = "sim-a"
url = "{sims[0]}"
[[replicas]]
name = "sim-b"
url = "{sims[1]}"

[[entries.short.variants]]
name = "fc"
strategy = "force_close"
weight = 1
[[entries.short.variants]]
name = "ka"
strategy = "keep_alive"
weight = 1

[canary]
sticky_header = "x-user-id"
"""
    )
    url, process = start_laneway(
        ["serve", "--config", str(config), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
    )
    try:
        admin_line = process.stdout.readline().strip()
        assert admin_line.startswith(ADMIN_PREFIX), admin_line
        yield url, admin_line[len(ADMIN_PREFIX):]
    finally:
        stop_laneway(process)


def chat(url, user):
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=body,
        headers={"content-type": "application/json", "x-user-id": user},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.read().endswith(b"data: [DONE]\n\n")
        return response.headers["x-laneway-variant"]


def table(dom, table_id):
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert match, f"table {table_id} missing"
    return match.group(1)


def test_status_page_shows_replicas_variants_and_verdicts(gateway, tmp_path):
    url, admin = gateway
    variants = {chat(url, f"user-{n}") for n in range(REQUESTS)}
    assert variants == {"fc", "ka"}
    dom = run_chromium("--dump-dom", f"{admin}/")
    replicas = table(dom, "replicas")
    assert replicas.count("<tr") == 1 + 2, replicas  # header row and one per replica
    assert "sim-a" in replicas and "sim-b" in replicas and "serving" in replicas
    assert "force_close" in table(dom, "variants") and "keep_alive" in table(dom, "variants")
    canary = table(dom, "canary")
    assert "baseline" in canary
    # 20 requests split over two variants: fewer than the 30 samples a verdict needs.
    assert "not enough data" in canary, canary
    screenshot = os.environ.get("LANEWAY_SCREENSHOT", str(tmp_path / "status_page.png"))
    run_chromium(f"--screenshot={screenshot}", "--window-size=1400,900", f"{admin}/")
    with open(screenshot, "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(screenshot) > 10_000
