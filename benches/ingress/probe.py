#!/usr/bin/env python3
"""Probes how laneway and HAProxy 2.6 handle HTTP/1.1 framing oddities, side by side.

    python3 benches/ingress/probe.py [--laneway BIN] [--out DIR] [--no-write]

Owns one recording replica (a threaded raw-socket HTTP/1.1 server on 127.0.0.1:0 that
numbers its connections and records every complete request), laneway's smart listener
(one run per short-entry strategy: force_close, spread, keep_alive) and HAProxy in the
configuration benches/peers.sh measures (leastconn, httpclose, one thread). Every case
runs against a freshly started proxy, on a fresh TCP connection, as raw bytes; the client
records the status it got (0: closed with no answer) and the replica whether the request
reached it. Response cases script the replica's answer on the inference path instead.
Prints a Markdown table and writes it, with the command and every observation, to
benches/results/2026-12-06-ingress/ (README.md, probe.json).

Deterministic: no randomness; every socket has a timeout, every loop a bound, and every
process started here is stopped (terminate, then kill) in a `finally`.
"""
import argparse
import http.client
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_DEADLINE_S = 270.0  # the whole probe, start to table
HEAD_BOUND_S = 5.0  # the client's wait for a response head
BODY_BOUND_S = 2.0  # the client's wait for the rest of a response
EXTRA_BOUND_S = 1.5  # case b: the wait for a second response on the same connection
SETTLE_S = 0.3  # a forwarded request has no event to wait on when nothing arrives
IO_TIMEOUT_S = 1.0  # one recv or send
REPLICA_IDLE_S = 15.0  # the replica closes a connection idle this long
HEAD_LIMIT = 65536
MAX_READS = 100_000  # recv calls per message, far above what any case needs
STRATEGIES = ("force_close", "spread", "keep_alive")
IGNORED_PATHS = {"/metrics", "/v1/models", "/health"}
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

B = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
assert len(B) == 0x48
CHUNKED_B = b"48\r\n" + B + b"\r\n0\r\n\r\n"
CHAT = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
BIG = b'{"prompt":"' + b"a" * (70 * 1024 - 13) + b'"}'
assert len(BIG) == 70 * 1024
COMPLETION = json.dumps({
    "id": "chatcmpl-probe", "object": "chat.completion", "created": 1796515200, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
}, separators=(",", ":")).encode()

# (id, label, raw request bytes)
REQUEST_CASES = [
    ("a", "CONNECT", b"CONNECT 127.0.0.1:28003 HTTP/1.1\r\nHost: 127.0.0.1:28003\r\n\r\n"),
    ("b", "CL + TE, smuggled GET", CHAT + b"Content-Length: 125\r\nTransfer-Encoding: chunked\r\n\r\n"
     + CHUNKED_B + b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("c", "TE: gzip, chunked", CHAT + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + CHUNKED_B),
    ("d", "TE: identity, chunked", CHAT + b"Transfer-Encoding: identity, chunked\r\n\r\n" + CHUNKED_B),
    ("e", "TE: gzip + TE: chunked", CHAT + b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
     + CHUNKED_B),
    ("f", "malformed chunk (3, hello)", CHAT + b"Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"),
    ("g", "no Host", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 72\r\n\r\n" + B),
    ("h", "two Host (a, b)", b"POST /v1/chat/completions HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n"
     b"Content-Length: 72\r\n\r\n" + B),
    ("i", "GET /anything", b"GET /anything HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("j", "POST /reset_prefix_cache", b"POST /reset_prefix_cache HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
    ("k", "70 KiB to /tokenize", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 71680\r\n\r\n" + BIG),
    ("l", "70 KiB to /debug/r0/tokenize", b"POST /debug/r0/tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 71680\r\n\r\n"
     + BIG),
    ("m", "Connection: x-request-id", CHAT + b"Connection: x-request-id\r\nX-Request-Id: client-7\r\n"
     b"Content-Length: 72\r\n\r\n" + B),
]
# HAProxy has no debug entry: case l is sent there as k again, its cell marked n/a.
HAPROXY_SUBSTITUTE = {"l": REQUEST_CASES[10][2]}

RESPONSE_CASES = [
    ("r1", "CL: 5 twice", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
    ("r2", "CL: 5, 5", b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello"),
    ("r3", "CL: 5 and CL: 6", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
    ("r4", "CL: 50 + TE: chunked", b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n"),
    ("r5", "unsolicited 101", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"),
    ("r6", "102 then 200", b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
]
CLOSE_CHAT = CHAT + b"Content-Type: application/json\r\nContent-Length: 72\r\nConnection: close\r\n\r\n" + B


class Malformed(Exception):
    pass


class Reader:
    """Buffered reads from a socket; each recv bounded by IO_TIMEOUT_S and the deadline."""

    def __init__(self, sock, deadline=None):
        self.sock, self.buf, self.deadline, self.eof = sock, b"", deadline, False

    def fill(self):
        if self.eof:
            return False
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline")
            self.sock.settimeout(min(left, IO_TIMEOUT_S))
        chunk = self.sock.recv(65536)
        self.eof = not chunk
        self.buf += chunk
        return bool(chunk)

    def until(self, marker, limit):
        """Up to and including marker; None at EOF first; Malformed past limit."""
        for _ in range(MAX_READS):
            if marker in self.buf:
                end = self.buf.index(marker) + len(marker)
                out, self.buf = self.buf[:end], self.buf[end:]
                return out
            if len(self.buf) > limit:
                raise Malformed("line or head too long")
            if not self.fill():
                return None
        raise Malformed("too many reads")

    def exact(self, n):
        for _ in range(MAX_READS):
            if len(self.buf) >= n:
                out, self.buf = self.buf[:n], self.buf[n:]
                return out
            if not self.fill():
                return None
        raise Malformed("too many reads")

    def rest(self):
        """Everything until EOF or the deadline."""
        for _ in range(MAX_READS):
            try:
                if not self.fill():
                    break
            except (TimeoutError, OSError):
                break
        out, self.buf = self.buf, b""
        return out


def parse_head(head):
    """(start line parts, [(lowercase name, value)]) of a head ending in CRLF CRLF."""
    lines = head[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not TOKEN.fullmatch(name):
            raise Malformed(f"bad header line {line!r}")
        headers.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    return lines[0].split(b" ", 2), headers


def values(headers, name):
    return [v.strip() for n, value in headers if n == name for v in value.split(",") if v.strip()]


def read_chunked(r):
    body = b""
    for _ in range(MAX_READS):
        line = r.until(b"\r\n", 4096)
        size = (line or b"").split(b";")[0].strip()
        if line is None or not re.fullmatch(rb"[0-9A-Fa-f]{1,8}", size):
            raise Malformed(f"bad chunk size {line!r}")
        if int(size, 16) == 0:
            for _ in range(64):  # trailers, then the empty line
                trailer = r.until(b"\r\n", 4096)
                if trailer is None:
                    raise Malformed("truncated trailers")
                if trailer == b"\r\n":
                    return body
            raise Malformed("too many trailers")
        data = r.exact(int(size, 16) + 2)
        if data is None or data[-2:] != b"\r\n":
            raise Malformed("chunk data not followed by CRLF")
        body += data[:-2]
    raise Malformed("too many chunks")


def read_request(r):
    """One request as a dict, None on a clean EOF; Malformed on anything else."""
    head = r.until(b"\r\n\r\n", HEAD_LIMIT)
    if head is None:
        if r.buf:
            raise Malformed("truncated head")
        return None
    start, headers = parse_head(head)
    if len(start) != 3 or not TOKEN.fullmatch(start[0]) or start[2] not in (b"HTTP/1.1", b"HTTP/1.0") \
            or not re.fullmatch(rb"[\x21-\x7e]+", start[1]):
        raise Malformed(f"bad request line {start!r}")
    te, cl = values(headers, "transfer-encoding"), values(headers, "content-length")
    if te:
        if [c.lower() for c in te].count("chunked") != 1 or te[-1].lower() != "chunked":
            raise Malformed("chunked is not the final coding")
        body = read_chunked(r)
    elif cl:
        if len(set(cl)) != 1 or not cl[0].isdigit():
            raise Malformed("bad Content-Length")
        body = r.exact(int(cl[0]))
    else:
        body = b""
    if body is None:
        raise Malformed("truncated body")
    return {"method": start[0].decode(), "target": start[1].decode("latin-1"), "headers": headers,
            "body_len": len(body), "framing": "chunked" if te else "length" if cl else "none"}


class Replica:
    """The recording replica: numbers connections, records complete requests, answers them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records, self.script, self.stopping = [], None, threading.Event()
        self.closed_by = {}  # connection number -> "proxy" or "replica": who closed it first
        self.conn_ids = itertools.count(1)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)
        self.thread.start()

    def accept_loop(self):
        end = time.monotonic() + RUN_DEADLINE_S + 30
        while not self.stopping.is_set() and time.monotonic() < end:
            try:
                sock, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self.serve, args=(sock, next(self.conn_ids)), daemon=True).start()

    def serve(self, sock, conn):
        sock.settimeout(REPLICA_IDLE_S)
        r, closer = Reader(sock), "replica"
        try:
            for _ in range(10_000):
                req = read_request(r)
                if req is None:
                    closer = "proxy"
                    return
                req["conn"] = conn
                path = req["target"].split("?")[0]
                with self.lock:
                    if path not in IGNORED_PATHS:
                        self.records.append(req)
                    script = self.script
                close = "close" in [v.lower() for v in values(req["headers"], "connection")] \
                    or (req["framing"] == "chunked" and values(req["headers"], "content-length"))
                if script is not None and path not in IGNORED_PATHS:
                    sock.sendall(script)
                else:
                    sock.sendall(answer(path, close))
                if close:
                    return
        except (Malformed, TimeoutError):
            return  # a malformed request or an idle connection: stop reading it
        except OSError:
            closer = "proxy"  # reset
        finally:
            with self.lock:
                self.closed_by[conn] = closer
            sock.close()

    def snapshot(self):
        with self.lock:
            return list(self.records)

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=2)
        self.listener.close()


def answer(path, close):
    if path == "/metrics":
        ctype, body = "text/plain; version=0.0.4", b'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    elif path == "/v1/models":
        ctype, body = "application/json", b'{"object":"list","data":[{"id":"m","object":"model"}]}'
    elif path == "/health":
        ctype, body = None, b""
    else:
        ctype, body = "application/json", COMPLETION
    head = "HTTP/1.1 200 OK\r\n" + (f"Content-Type: {ctype}\r\n" if ctype else "")
    head += f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    return head.encode() + body


# ------------------------------------------------------------------------------- client
def read_response(r):
    """One response: {status, interim, headers, body, complete}; None at EOF before any byte."""
    interim = []
    for _ in range(8):
        try:
            head = r.until(b"\r\n\r\n", HEAD_LIMIT)
        except (TimeoutError, OSError, Malformed) as error:
            head = None if r.buf == b"" else r.buf
            if head is None and isinstance(error, TimeoutError) and not interim:
                return {"status": "no answer", "interim": [], "headers": [], "body": b"", "complete": False}
        if head is None:
            return None if not interim else {"status": 0, "interim": interim, "headers": [], "body": b"",
                                             "complete": False}
        match = re.match(rb"HTTP/1\.[01] (\d{3})", head)
        if not match:
            return {"status": "garbage", "interim": interim, "headers": [], "body": head[:80], "complete": False}
        status = int(match.group(1))
        try:
            _, headers = parse_head(head)
        except Malformed:
            headers = []
        if 100 <= status < 200 and status != 101:
            interim.append(status)
            continue
        body, complete = b"", True
        te, cl = values(headers, "transfer-encoding"), values(headers, "content-length")
        try:
            if status in (101, 204, 304):
                pass
            elif te and te[-1].lower() == "chunked":
                body = read_chunked(r)
            elif cl and len(set(cl)) == 1 and cl[0].isdigit():
                body = r.exact(int(cl[0]))
                complete = body is not None and len(body) == int(cl[0])
                body = body if body is not None else r.buf
            else:
                body, complete = r.rest(), False
        except (TimeoutError, OSError, Malformed):
            body, complete = r.buf, False
        return {"status": status, "interim": interim, "headers": headers, "body": body, "complete": complete}
    return {"status": "only interim", "interim": interim, "headers": [], "body": b"", "complete": False}


def exchange(port, raw, more=False):
    """Sends raw on a fresh connection; the responses read (one, or a second with `more`)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
    try:
        try:
            sock.sendall(raw)
        except OSError:
            pass  # the proxy may answer and close before the body is sent: read what it said
        r = Reader(sock, time.monotonic() + HEAD_BOUND_S)
        responses = []
        for index in range(2 if more else 1):
            if index:
                r.deadline = time.monotonic() + EXTRA_BOUND_S
            else:
                r.deadline = time.monotonic() + HEAD_BOUND_S
            try:
                response = read_response(r)
            except OSError:
                response = None
            if response is None:
                if not responses:
                    responses.append({"status": 0, "interim": [], "headers": [], "body": b"", "complete": False})
                break
            responses.append(response)
            r.deadline = time.monotonic() + BODY_BOUND_S
        return responses
    finally:
        sock.close()


# ---------------------------------------------------------------------------- processes
def free_port():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def http_status(port, method, path, body=None, timeout=1.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


class Proxy:
    """One started proxy: its process, its client port, its log; stopped by PID."""

    def __init__(self, args, port, ready_port, ready_path, log_path):
        self.port, self.log_path = port, log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self.wait_ready(ready_port, ready_path)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, ready_port, ready_path):
        end = time.monotonic() + 15
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if http_status(ready_port, "GET", ready_path) == 200 \
                        and http_status(self.port, "POST", "/v1/chat/completions", B, timeout=3) == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"not ready within 15 s; see {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()


def laneway_config(work, strategy, replica_port):
    port, admin = free_port(), free_port()
    path = work / f"laneway-{strategy}.toml"
    path.write_text(f"""listen = "127.0.0.1:{port}"
admin_listen = "127.0.0.1:{admin}"
body_limit_bytes = 65536

[routes]
forward = ["/tokenize"]

[entries.short]
strategy = "{strategy}"

[entries.debug]
smart_listener = true

[[replicas]]
name = "r0"
url = "http://127.0.0.1:{replica_port}"
""")
    return path, port, admin


HAPROXY_CFG = """# benches/peers.sh's haproxy-lc-close (leastconn, httpclose, one thread), timeouts 10 s,
# and a 413 above 64 KiB as laneway's body_limit_bytes = 65536 (the body is buffered to be
# measured: tune.bufsize 131072 holds the 70 KiB case whole).
global
    nbthread 1
    maxconn 200
    tune.bufsize 131072
    log stderr format raw local0 err

defaults
    mode http
    timeout connect 10s
    timeout client 10s
    timeout server 10s
    timeout http-request 10s
    timeout http-keep-alive 10s

frontend entry
    bind 127.0.0.1:{port}
    option http-buffer-request
    http-request deny deny_status 413 if {{ req.body_size gt 65536 }}
    default_backend fleet

backend fleet
    balance leastconn
    option httpclose
    server r0 127.0.0.1:{replica_port}
"""


# -------------------------------------------------------------------------------- cases
def new_records(replica, before):
    return replica.snapshot()[before:]


def describe_sent(records):
    return {0: "not sent", 1: "sent once", 2: "sent twice"}.get(len(records), f"sent {len(records)}x")


def status_text(response):
    interim = "+".join(str(s) for s in response["interim"])
    return f"{interim}+{response['status']}" if interim else str(response["status"])


def request_case(case_id, raw, replica, port):
    before = len(replica.snapshot())
    responses = exchange(port, raw, more=case_id == "b")
    time.sleep(SETTLE_S)
    records = new_records(replica, before)
    smuggled = [rec for rec in records if rec["target"].startswith("/smuggled")]
    main = [rec for rec in records if rec not in smuggled]
    cell = f"{status_text(responses[0])}, {describe_sent(main)}"
    if case_id == "b":
        cell += f"; /smuggled {'reached the replica' if smuggled else 'not sent'}"
        if len(responses) > 1:
            cell += f"; 2nd response {status_text(responses[1])}"
    if case_id in ("b", "c", "d", "e") and main:
        te = values(main[0]["headers"], "transfer-encoding")
        cl = values(main[0]["headers"], "content-length")
        cell += " (as " + " + ".join((["TE: " + ", ".join(te)] if te else []) + (["CL: " + ", ".join(cl)] if cl else [])) + ")"
    if case_id == "m" and main:
        ids = values(main[0]["headers"], "x-request-id")
        nominated = "x-request-id" in [v.lower() for v in values(main[0]["headers"], "connection")]
        cell += "; replica saw " + (f"X-Request-Id: {', '.join(ids)}" if ids else "no X-Request-Id")
        cell += ", with Connection: x-request-id" if nominated else ""
    return {"cell": cell, "status": responses[0]["status"], "responses": [summary(r) for r in responses],
            "records": records, "refused": not main and refused(responses[0]["status"])}


def response_case(case_id, script, replica, port):
    before = len(replica.snapshot())
    with replica.lock:
        replica.script = script
    try:
        responses = [exchange(port, CLOSE_CHAT)[0] for _ in range(2 if case_id == "r4" else 1)]
        time.sleep(SETTLE_S)
    finally:
        with replica.lock:
            replica.script = None
    records = new_records(replica, before)
    with replica.lock:
        closed_by = {rec["conn"]: replica.closed_by[rec["conn"]] for rec in records if rec["conn"] in replica.closed_by}
    first = responses[0]
    cl = [v for n, v in first["headers"] if n == "content-length"]
    te = [v for n, v in first["headers"] if n == "transfer-encoding"]
    parts = [status_text(first)]
    if not refused(first["status"]):
        parts.append("CL " + (" / ".join(cl) if cl else "none") + ("".join(", TE " + v for v in te)))
    if first["status"] not in (0, "no answer"):
        parts.append(short(first["body"], first["status"]) + ("" if first["complete"] else " (cut)"))
    if len(records) != len(responses):
        parts.append(f"replica got {len(records)} requests for {len(responses)}")
    if case_id == "r4":
        second = responses[1]
        parts.append(f"2nd: {status_text(second)} {short(second['body'], second['status'])}")
        if len(records) >= 2:
            reused = records[1]["conn"] == records[0]["conn"]
            closed = records[0]["conn"] in closed_by
            parts.append("1st upstream conn " + ("reused" if reused else "closed, not reused" if closed
                                                 else "left open, not reused"))
    return {"cell": ", ".join(parts), "status": first["status"], "responses": [summary(r) for r in responses],
            "records": records, "closed_by": closed_by, "refused": refused(first["status"])}


def refused(status):
    """The client was told no: closed, timed out, or a 4xx/5xx."""
    return not isinstance(status, int) or status == 0 or status >= 400


def short(body, status):
    if refused(status) and body.lstrip().startswith(b'{"error"'):
        return "OpenAI error"
    if refused(status) and body.lstrip().startswith(b"<html>"):
        return "HTML error page"
    if not body.strip():
        return "empty body"
    text = repr(body[:40])[2:-1]
    return "`" + text.replace("|", "\\|") + "`" + ("..." if len(body) > 40 else "")


def summary(response):
    return {"status": response["status"], "interim": response["interim"], "headers": response["headers"],
            "body": response["body"][:300].decode("latin-1"), "complete": response["complete"]}


# What RFC 9110/9112 (or laneway's design) ask of a gateway in each case: the README's notes and case list.
EXPECTED = {
    "a": "a tunnel request; a gateway that offers no tunnel answers 405 or 501 (RFC 9110 §9.1)",
    "b": "RFC 9112 §6.1: reject, or let TE win; either way close after responding",
    "c": "chunked is final, so the framing holds; a coding the server does not know SHOULD get 501 (RFC 9112 §6.1)",
    "d": "`identity` is no longer a registered coding: as c",
    "e": "two field lines make one list, `gzip, chunked`: as c",
    "f": "a 3-byte chunk `hel`, then `lo` where CRLF must be: invalid framing",
    "g": "RFC 9112 §3.2: an HTTP/1.1 request without Host MUST get 400",
    "h": "RFC 9112 §3.2: more than one Host line MUST get 400",
    "i": "a path the gateway does not serve",
    "j": "a vLLM control endpoint, not for public clients",
    "k": "over the 65536-byte body limit",
    "l": "over the limit, through laneway's debug entry",
    "m": "RFC 9110 §7.6.1: a proxy MUST remove the fields Connection names before forwarding",
    "r1": "RFC 9110 §8.6: identical values MUST be rejected or replaced by one",
    "r2": "as r1, in one field line",
    "r3": "RFC 9112 §6.3: unrecoverable; a proxy MUST close the upstream connection and answer 502",
    "r4": "RFC 9112 §6.3: TE overrides CL, ought to be handled as an error; forwarded only without the CL",
    "r5": "RFC 9110 §7.8: a server MUST NOT switch to a protocol the request did not ask for",
    "r6": "RFC 9110 §15.2: a client MUST parse unexpected 1xx; a proxy MUST forward 1xx it did not ask for",
}


def run_target(name, start_proxy, cases, replica, check_deadline):
    """Every case against a freshly started proxy: no case sees what an earlier one left."""
    results = {}
    for case_id, kind, raw in cases:
        check_deadline()
        proxy = start_proxy(f"{name}-{case_id}")
        try:
            run = request_case if kind == "request" else response_case
            results[case_id] = run(case_id, raw, replica, proxy.port)
        finally:
            proxy.stop()
        print(f"  {name:22} {case_id:3} {results[case_id]['cell']}", file=sys.stderr)
    return results


def table(results, targets):
    lines = ["| case | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
    labels = [(c[0], c[1]) for c in REQUEST_CASES] + [(c[0], c[1]) for c in RESPONSE_CASES]
    for case_id, label in labels:
        cells = [results[t][case_id]["cell"] for t in targets]
        lines.append(f"| {case_id}. {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(results, targets):
    """One line per case where a laneway strategy and HAProxy differ: which is stricter."""
    haproxy, out = targets[-1], []
    for case_id in [c[0] for c in REQUEST_CASES] + [c[0] for c in RESPONSE_CASES]:
        if case_id == "l":
            continue  # no HAProxy counterpart
        peer, verdicts = results[haproxy][case_id], {}
        for target in targets[:-1]:
            lane = results[target][case_id]
            if lane["refused"] and not peer["refused"]:
                verdict = "laneway is stricter: it refuses what HAProxy passes"
            elif peer["refused"] and not lane["refused"]:
                verdict = "HAProxy is stricter: it refuses what laneway passes"
            elif lane["refused"] and lane["status"] != peer["status"]:
                verdict = f"both refuse, laneway with {lane['status']}, HAProxy with {peer['status']}"
            elif not lane["refused"] and lane["cell"] != peer["cell"]:
                verdict = f"both pass; laneway: {lane['cell']}; HAProxy: {peer['cell']}"
            else:
                continue
            verdicts.setdefault(verdict, []).append(target.removeprefix("laneway "))
        for verdict, strategies in verdicts.items():
            which = "every strategy" if len(strategies) == len(targets) - 1 else ", ".join(strategies)
            out.append(f"- **{case_id}** ({which}): {verdict}. Expected: {EXPECTED[case_id]}.")
    return "\n".join(out) if out else "- none: every cell matches."


def shown(raw):
    """Raw bytes as a Python literal, with B and the 70 KiB body named rather than spelt out."""
    text = repr(raw.replace(BIG, b"{BIG}"))[2:-1]
    return text.replace(repr(B)[2:-1], "{B}")


def write_readme(out_dir, command, haproxy_version, laneway_build, rendered, note_lines):
    cases = "\n".join([f"- **{c[0]}** `{shown(c[2])}`: {EXPECTED[c[0]]}" for c in REQUEST_CASES]
                      + [f"- **{c[0]}** the replica answers `{shown(c[2])}`: {EXPECTED[c[0]]}" for c in RESPONSE_CASES])
    text = f"""# Framing oddities at the ingress: laneway against HAProxy 2.6 (2026-12-06)

Odd or hostile HTTP/1.1 framing sent to laneway's smart listener (once for each short-entry
strategy: `force_close`, `spread`, `keep_alive`) and to HAProxy, with one recording replica
behind them. Each case goes as raw bytes on a fresh TCP connection to a freshly started proxy.
Request cases: what the client got, and whether the replica received a complete request.
Response cases: the replica answers a valid chat request (`Connection: close`) with scripted
bytes; what the client got.

```
{command}
```

- HAProxy (`haproxy -v`): `{haproxy_version}`.
  Configured as `benches/peers.sh`'s `haproxy-lc-close` (leastconn, `option httpclose`,
  `nbthread 1`), timeouts 10 s, plus `tune.bufsize 131072`, `option http-buffer-request` and
  `http-request deny deny_status 413 if {{ req.body_size gt 65536 }}` to match laneway's
  `body_limit_bytes = 65536` (so HAProxy buffers each body before forwarding it).
- laneway: {laneway_build}.
  `body_limit_bytes = 65536`, `[routes] forward = ["/tokenize"]`,
  `[entries.debug] smart_listener = true`, one replica `r0`.
- The replica (`benches/ingress/probe.py`) parses Content-Length and chunked bodies, stops reading
  a connection on anything malformed, numbers its connections, and answers a valid chat completion.

Cells: the status the client got (`0`: closed with no answer; `no answer`: nothing within 5 s;
`102+200`: an interim answer first), then whether the replica received the request complete
(`not sent`, `sent once`). Response cases give the client's `Content-Length` field lines and
`Transfer-Encoding`, the body it got (`(cut)`: not whole within 2 s), and say so when the
replica did not get exactly one request per client request. r4 sends two requests, one after
the other, and says whether the second went on the first one's upstream connection. Every
response and every request the replica recorded: `probe.json`.

{rendered}

Where laneway and HAProxy differ:

{note_lines}

Cases, exact bytes (B is the 72-byte body `{B.decode()}`, BIG the 71,680-byte
`{{"prompt":"aaa...a"}}`; a response case's request is `{shown(CLOSE_CHAT)}`):

{cases}
"""
    (out_dir / "README.md").write_text(text)


def wait_for(path, seconds):
    end = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > end:
            raise SystemExit(f"{path} is missing after {seconds} s")
        time.sleep(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--laneway", default=str(ROOT / "target/debug/laneway"))
    parser.add_argument("--out", default=str(ROOT / "benches/results/2026-12-06-ingress"))
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    started = time.monotonic()

    def check_deadline():
        if time.monotonic() - started > RUN_DEADLINE_S:
            raise RuntimeError(f"run past its {RUN_DEADLINE_S:.0f} s bound")

    wait_for(Path(args.laneway), 120)
    haproxy = shutil.which("haproxy")
    if not haproxy:
        raise SystemExit("haproxy is not installed: bash scripts/install-bench-deps.sh")
    haproxy_version = subprocess.run([haproxy, "-v"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          timeout=10).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True,
                           text=True, timeout=10).stdout.strip()
    build_time = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(args.laneway)))
    laneway_build = f"`target/debug/laneway` built {build_time} from {head}" + \
        (" with uncommitted changes under `src/`" if dirty else "")

    work = Path(tempfile.mkdtemp(prefix="laneway-ingress."))
    # A copy: a build that replaces the binary mid-run must not mix two builds in one table.
    binary = work / "laneway"
    shutil.copy2(args.laneway, binary)
    request_cases = [(c[0], "request", c[2]) for c in REQUEST_CASES]
    response_cases = [(c[0], "response", c[2]) for c in RESPONSE_CASES]
    replica = Replica()
    results, targets, failed = {}, [], True
    try:
        for strategy in STRATEGIES:
            config, port, admin = laneway_config(work, strategy, replica.port)
            check = subprocess.run([binary, "serve", "--config", config, "--check"], capture_output=True, text=True,
                                   timeout=30)
            if check.returncode != 0:
                raise RuntimeError(f"laneway --check refused {config}: {check.stderr or check.stdout}")

            def start_laneway(log_name, config=config, port=port, admin=admin):
                return Proxy([binary, "serve", "--config", config], port, admin, "/health", work / f"{log_name}.log")

            name = f"laneway {strategy}"
            results[name] = run_target(name, start_laneway, request_cases + response_cases, replica, check_deadline)
            targets.append(name)

        port = free_port()
        config = work / "haproxy.cfg"
        config.write_text(HAPROXY_CFG.format(port=port, replica_port=replica.port))

        def start_haproxy(log_name):
            return Proxy([haproxy, "-f", config, "-db"], port, port, "/health", work / f"{log_name}.log")

        haproxy_cases = [(c, k, HAPROXY_SUBSTITUTE.get(c, raw)) for c, k, raw in request_cases] + response_cases
        name = "HAProxy 2.6"
        results[name] = run_target(name, start_haproxy, haproxy_cases, replica, check_deadline)
        results[name]["l"]["cell"] = f"n/a (k again: {results[name]['l']['cell']})"
        targets.append(name)
        failed = False
    finally:
        replica.stop()
        if failed:
            print(f"probe failed; logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    rendered = table(results, targets)
    note_lines = notes(results, targets)
    print(rendered)
    print()
    print(note_lines)
    if not args.no_write:
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        command = "python3 benches/ingress/probe.py"
        write_readme(out_dir, command, haproxy_version, laneway_build, rendered, note_lines)
        (out_dir / "probe.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        print(f"wrote {out_dir}/README.md and probe.json ({time.monotonic() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
