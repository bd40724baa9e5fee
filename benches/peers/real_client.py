#!/usr/bin/env python3
"""Independent streaming client for the real-engine parts of benches/peers.sh (real.sh).

It is not `laneway bench`: a gateway is judged by a client it did not write. Standard
library only (asyncio streams speaking HTTP/1.1, like an OpenAI SDK's pooled keep-alive
client), so it runs on any Python 3.11 with nothing installed.

Every request is an OpenAI chat completion with `stream: true` and
`stream_options.include_usage`; per request it records TTFT (first non-empty content),
TPOT ((e2e - ttft) / (completion_tokens - 1)), e2e, and prompt, completion and cached
tokens from the final usage chunk. Workloads (seeded; the same bytes for every target but
a short salt at the start of the first message, `[ITEM:HASH]`, HASH twelve capital letters
hashed from WORKLOAD-TARGET-ROUND-SEED-RUNID, so that no target or round inherits another's
prefix cache, every target's prompts are the same number of tokens, and unrelated prompts
share no block through the salt):

  conv    C conversations x T turns, closed loop (one client each); each turn appends a
          Q-token question to the conversation and the previous real answer text; answers
          are O tokens (max_tokens = min_tokens = O, ignore_eos); `x-session-id` and `user`
          name the conversation (--no-session: nothing does, as many clients send);
          --system-tokens S opens every conversation with one shared S-token system prompt,
          --think-s W pauses a seeded exponential W s on average between a user's turns.
  prefix  G groups of a shared context (system message) + a unique question, Poisson
          arrivals at R/s, N requests; --hot-share S sends a share S of them to group 0 (a
          hot prefix) and the rest evenly to the others.
  mixed   a weighted mix of input/output shapes (default 70% 500/100, 30% 4000/200),
          Poisson arrivals at R/s, N requests.
  closed  N requests of one shape from C closed-loop clients (entry-strategy checks).

Targets NAME=URL run in interleaved rounds, the order turned by one each round (A B C, B C A,
C A B, ...) so that no target always takes the same place; NAME=URL1+URL2 is several
gateways in front of the same replicas, taking requests in turn. Before the first round,
each --replicas URL gets two unrecorded waves of 16 streamed chats (--no-warm-up: none): a
freshly started engine answers its first requests slower, and without it the first target
of round 1 met it cold and only that one. Token counts are calibrated
once: tokens per word of the word generator, from the replica's `/tokenize` when it has one,
else from the `usage` of two one-token completions, else 1.3.

Output: --json FILE (every request, per target+round summaries, written after every run)
and --markdown FILE (benches/peers/real_table.py: per target, the mean over rounds and the
min-max spread).
"""

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_table  # noqa: E402

# --------------------------------------------------------------------------------- words

ENGLISH = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an each "
    "which she do how their if will up other about out many then them these so some her "
    "would make like him into time has look two more write go see number no way could people "
    "my than first water been call who oil its now find long down day did get come made may "
    "part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much "
    "before line right too mean old any same tell boy follow came want show also around form"
).split()


class Words:
    """A fixed vocabulary (English and pseudo-words, independent of the run's seed, so one
    calibration holds for every run) and seeded text drawn from it."""

    def __init__(self):
        rng = random.Random("laneway-real-words")
        consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
        pseudo = {
            "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 3)))
            for _ in range(3000)
        }
        self.vocab = ENGLISH + sorted(pseudo)

    def text(self, rng: random.Random, words: int) -> str:
        out = []
        for i in range(max(1, words)):
            word = rng.choice(self.vocab)
            if i % 12 == 11:
                word += "."
            out.append(word)
        return " ".join(out)


# ---------------------------------------------------------------------------------- HTTP


class HttpError(Exception):
    pass


def split_url(url: str):
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or not parsed.hostname:
        raise SystemExit(f"only http://HOST:PORT targets are supported, not {url!r}")
    return parsed.hostname, parsed.port or 80, parsed.path.rstrip("/")


class Pool:
    """Keep-alive HTTP/1.1 connections to one target, as a pooled SDK client keeps them:
    an idle one is reused, else a new one opened; a response that says `Connection: close`
    (HAProxy's httpclose) or is not framed retires its connection."""

    def __init__(self, url: str):
        self.host, self.port, self.prefix = split_url(url)
        self.idle = []
        self.opened = 0

    async def close(self):
        for _, writer in self.idle:
            writer.close()
        self.idle = []

    async def _connect(self):
        self.opened += 1
        return await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    async def request(self, method, path, body, headers, on_data, on_head=None):
        """Sends one request; calls on_head(status, headers) once the response head is in,
        then on_data(bytes) with each piece of the decoded body as it arrives. Returns
        (status, lowercase header dict). A reused connection that the server had closed
        while it idled is retried once on a fresh one."""
        reused = bool(self.idle)
        conn = self.idle.pop() if reused else await self._connect()
        try:
            return await self._exchange(conn, method, path, body, headers, on_data, on_head)
        except _StaleConnection:
            if not reused:
                raise HttpError("connection closed before the response") from None
            conn = await self._connect()
            return await self._exchange(conn, method, path, body, headers, on_data, on_head)

    async def _exchange(self, conn, method, path, body, headers, on_data, on_head):
        reader, writer = conn
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        head.append(f"Content-Length: {len(body)}")
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await writer.drain()
            status_line = await reader.readline()
        except (ConnectionError, OSError) as error:
            writer.close()
            raise _StaleConnection() from error
        if not status_line:
            writer.close()
            raise _StaleConnection()
        reusable = True
        try:
            parts = status_line.decode("latin-1").split(" ", 2)
            status = int(parts[1])
            if parts[0] != "HTTP/1.1":
                reusable = False
            response_headers = {}
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                response_headers[name.strip().lower()] = value.strip()
            if response_headers.get("connection", "").lower() == "close":
                reusable = False
            if on_head:
                on_head(status, response_headers)
            if "chunked" in response_headers.get("transfer-encoding", "").lower():
                while True:
                    size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    on_data(await reader.readexactly(size))
                    await reader.readexactly(2)
            elif "content-length" in response_headers:
                remaining = int(response_headers["content-length"])
                while remaining > 0:
                    data = await reader.read(min(remaining, 1 << 16))
                    if not data:
                        raise HttpError("connection closed inside the body")
                    remaining -= len(data)
                    on_data(data)
            else:
                reusable = False
                while data := await reader.read(1 << 16):
                    on_data(data)
        except BaseException:
            writer.close()
            raise
        if reusable:
            self.idle.append(conn)
        else:
            writer.close()
        return status, response_headers


class _StaleConnection(Exception):
    pass


class Spread:
    """Several gateways in front of the same replicas, as one target (`URL1+URL2`): each
    request goes to the next in turn, as a load balancer in front of them would send it."""

    def __init__(self, urls):
        self.pools = [Pool(url) for url in urls]
        self.turn = 0

    @property
    def opened(self):
        return sum(pool.opened for pool in self.pools)

    async def close(self):
        for pool in self.pools:
            await pool.close()

    async def request(self, *args, **kwargs):
        pool = self.pools[self.turn % len(self.pools)]
        self.turn += 1
        return await pool.request(*args, **kwargs)


async def fetch(url: str, method="GET", payload=None, timeout=10.0):
    """One request on a connection of its own; returns (status, body bytes)."""
    pool = Pool(url)
    chunks = []
    body = json.dumps(payload).encode() if payload is not None else b""
    headers = {"Content-Type": "application/json", "Connection": "close"}
    try:
        status, _ = await asyncio.wait_for(pool.request(method, "", body, headers, chunks.append), timeout)
    finally:
        await pool.close()
    return status, b"".join(chunks)


# ----------------------------------------------------------------------------- requests


class Run:
    """One target's round of one workload: its pool, its salt and its records."""

    def __init__(self, args, target, url, round_no, model):
        self.args = args
        self.target = target
        self.round = round_no
        self.model = model
        urls = url.split("+")
        self.pool = Pool(url) if len(urls) == 1 else Spread(urls)
        self.tag = f"{args.name}-{target}-{round_no}-{args.seed}-{args.run_id}"
        digest = int.from_bytes(hashlib.sha1(self.tag.encode()).digest()[:8], "big")
        self.tag_letters = "".join(chr(ord("A") + (digest >> (5 * i)) % 26) for i in range(12))
        self.records = []
        self.started = time.perf_counter()

    def salt(self, item):
        """The prefix of ITEM's first message (a conversation, a prefix group, a request).
        What tells items, targets and rounds apart comes first (the item, then the tag's
        hash), so that prompts with nothing in common share no cache block, nor a gateway's
        or router's index entry, through it, however small the block. The hash is twelve
        capital letters, the same number of tokens for every target and round (one each:
        the local models' tokenizers never saw a capital). A salt that spelled out the
        target's name was 34 tokens for laneway and 43-46 for HAProxy's target: a shared
        2,000-token system prompt then filled 15 of the engine's 128-token blocks for one
        and 16 for the other, and each target's prompts met the engine's block edges in
        places of their own."""
        return f"[{item}:{self.tag_letters}]"


async def stream_chat(run: Run, messages, output_tokens, meta, session=None):
    """Sends one streamed chat completion; returns its record (with the answer text)."""
    payload = {
        "model": run.model,
        "messages": messages,
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if session:
        payload["user"] = session
        headers["x-session-id"] = session
    body = json.dumps(payload).encode()
    record = {"target": run.target, "round": run.round, **meta, "status": None, "error": None,
              "ttft": None, "tpot": None, "e2e": None, "prompt_tokens": None,
              "completion_tokens": None, "cached_tokens": None, "answer_chars": 0}
    sent = time.perf_counter()
    record["sent_at"] = round(sent - run.started, 6)
    state = {"buffer": b"", "ttft": None, "usage": None, "answer": [], "error_body": b"", "done": False}

    def on_head(status, response_headers):
        record["status"] = status
        for name in ("x-laneway-entry", "x-laneway-replica", "x-laneway-strategy", "x-sim-replica"):
            if name in response_headers:
                record[name.removeprefix("x-").replace("-", "_")] = response_headers[name]

    def on_data(data):
        if record["status"] != 200:
            state["error_body"] = (state["error_body"] + data)[:300]
            return
        state["buffer"] += data
        *lines, state["buffer"] = state["buffer"].split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line.startswith(b"data:"):
                continue
            data_text = line[5:].strip()
            if data_text == b"[DONE]":
                state["done"] = True
                continue
            try:
                chunk = json.loads(data_text)
            except ValueError:
                continue
            if chunk.get("usage"):
                state["usage"] = chunk["usage"]
            for choice in chunk.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    if state["ttft"] is None:
                        state["ttft"] = time.perf_counter() - sent
                    state["answer"].append(content)

    try:
        status, _ = await asyncio.wait_for(
            run.pool.request("POST", "/v1/chat/completions", body, headers, on_data, on_head),
            run.args.request_timeout)
        if status != 200:
            record["error"] = f"HTTP {status}: {state['error_body'].decode('utf-8', 'replace')}"
    except asyncio.TimeoutError:
        record["error"] = f"timeout after {run.args.request_timeout} s"
    except (HttpError, ConnectionError, OSError, asyncio.IncompleteReadError, ValueError) as error:
        record["error"] = f"{type(error).__name__}: {error}"
    end = time.perf_counter()
    answer = "".join(state["answer"])
    if record["error"] is None:
        usage = state["usage"] or {}
        record["e2e"] = end - sent
        record["ttft"] = state["ttft"]
        record["prompt_tokens"] = usage.get("prompt_tokens")
        record["completion_tokens"] = usage.get("completion_tokens")
        record["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        completion = record["completion_tokens"] or 0
        if state["ttft"] is not None and completion > 1:
            record["tpot"] = (record["e2e"] - state["ttft"]) / (completion - 1)
        if not state["usage"]:
            record["error"] = "no usage chunk in the stream"
        elif state["ttft"] is None:
            record["error"] = "no content in the stream"
        elif not state["done"]:
            record["error"] = "stream ended without [DONE]"
    record["answer_chars"] = len(answer)
    run.records.append(record)
    return record, answer


# ---------------------------------------------------------------------------- workloads


def words_for(tokens: int, calibration) -> int:
    return max(1, round(tokens / calibration["tokens_per_word"]))


async def conv_workload(run: Run, words: Words, calibration):
    a = run.args
    q_words = words_for(a.input_tokens, calibration)

    # One system prompt for every conversation (an assistant's instructions), salted per
    # target and round as a whole; each conversation's own salt then leads its first question.
    system = []
    if a.system_tokens:
        text = words.text(random.Random(f"{a.seed}-conv-system"), words_for(a.system_tokens, calibration))
        system = [{"role": "system", "content": f"{run.salt('system')} {text}"}]

    async def conversation(index):
        if a.ramp_up > 0:
            await asyncio.sleep(a.ramp_up * index / a.clients)
        session = None if a.no_session else f"{a.name}-{run.target}-{run.round}-{a.run_id}-c{index}"
        messages = list(system)
        think = random.Random(f"{a.seed}-conv-think-{index}")
        for turn in range(a.turns):
            if turn > 0 and a.think_s > 0:
                await asyncio.sleep(think.expovariate(1.0 / a.think_s))
            question = words.text(random.Random(f"{a.seed}-conv-{index}-{turn}"), q_words)
            if turn == 0:
                question = f"{run.salt(f'c{index}')} {question}"
            messages.append({"role": "user", "content": question})
            meta = {"id": f"c{index}t{turn}", "conversation": index, "turn": turn}
            record, answer = await stream_chat(run, list(messages), a.output_tokens, meta, session)
            if record["error"]:
                return
            messages.append({"role": "assistant", "content": answer})

    await asyncio.gather(*(conversation(i) for i in range(a.clients)))
    return a.clients * a.turns


async def open_loop(run: Run, plan):
    """plan: list of (offset seconds, messages, output tokens, meta), sent at their offsets."""
    tasks = []
    try:
        for offset, messages, output_tokens, meta in plan:
            delay = run.started + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(stream_chat(run, messages, output_tokens, meta)))
        await asyncio.gather(*tasks)
    finally:
        # Cut by the run's time limit: nothing of this run may outlive it.
        for task in tasks:
            task.cancel()
    return len(plan)


def poisson_offsets(seed, rate, count):
    rng = random.Random(f"{seed}-arrivals")
    offsets, now = [], 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


def prefix_plan(run: Run, words: Words, calibration):
    a = run.args
    context_words = words_for(a.context_tokens, calibration)
    question_words = words_for(a.input_tokens, calibration)
    contexts = [words.text(random.Random(f"{a.seed}-context-{g}"), context_words) for g in range(a.groups)]
    pick = random.Random(f"{a.seed}-groups")
    plan = []
    for i, offset in enumerate(poisson_offsets(a.seed, a.rate, a.requests)):
        if a.hot_share and (a.groups == 1 or pick.random() < a.hot_share):
            group = 0
        elif a.hot_share:
            group = 1 + pick.randrange(a.groups - 1)
        else:
            group = pick.randrange(a.groups)
        question = words.text(random.Random(f"{a.seed}-question-{i}"), question_words)
        messages = [{"role": "system", "content": f"{run.salt(f'g{group}')} {contexts[group]}"},
                    {"role": "user", "content": question}]
        plan.append((offset, messages, a.output_tokens, {"id": f"p{i}", "group": group}))
    return plan


def parse_mix(text):
    shapes = []
    for part in text.split(","):
        weight, _, shape = part.partition(":")
        tokens_in, _, tokens_out = shape.partition("/")
        shapes.append((float(weight), int(tokens_in), int(tokens_out)))
    return shapes


def mixed_plan(run: Run, words: Words, calibration):
    a = run.args
    shapes = parse_mix(a.mix)
    total = sum(weight for weight, _, _ in shapes)
    pick = random.Random(f"{a.seed}-shapes")
    plan = []
    for i, offset in enumerate(poisson_offsets(a.seed, a.rate, a.requests)):
        roll, acc = pick.random() * total, 0.0
        for weight, tokens_in, tokens_out in shapes:
            acc += weight
            if roll < acc:
                break
        text = words.text(random.Random(f"{a.seed}-mixed-{i}"), words_for(tokens_in, calibration))
        messages = [{"role": "user", "content": f"{run.salt(f'm{i}')} {text}"}]
        plan.append((offset, messages, tokens_out, {"id": f"m{i}", "shape": f"{tokens_in}/{tokens_out}"}))
    return plan


async def closed_workload(run: Run, words: Words, calibration):
    a = run.args
    n_words = words_for(a.input_tokens, calibration)
    next_index = iter(range(a.requests))

    async def client(index):
        if a.ramp_up > 0:
            await asyncio.sleep(a.ramp_up * index / a.clients)
        for i in next_index:
            text = words.text(random.Random(f"{a.seed}-closed-{i}"), n_words)
            messages = [{"role": "user", "content": f"{run.salt(f'q{i}')} {text}"}]
            await stream_chat(run, messages, a.output_tokens, {"id": f"q{i}", "client": index})

    await asyncio.gather(*(client(i) for i in range(a.clients)))
    return a.requests


async def run_workload(run: Run, words: Words, calibration):
    kind = run.args.workload
    if kind == "conv":
        return await conv_workload(run, words, calibration)
    if kind == "prefix":
        return await open_loop(run, prefix_plan(run, words, calibration))
    if kind == "mixed":
        return await open_loop(run, mixed_plan(run, words, calibration))
    return await closed_workload(run, words, calibration)


# ------------------------------------------------------------------- calibration, metrics


async def discover_model(url):
    try:
        status, body = await fetch(url + "/v1/models")
        if status == 200:
            return json.loads(body)["data"][0]["id"]
    except (HttpError, OSError, asyncio.TimeoutError, ValueError, KeyError, IndexError):
        pass
    return "tiny"


async def calibrate(url, model, words: Words):
    """Tokens per word of the generator: the difference between a short and a long text
    (so template and special tokens cancel), counted by the replica's tokenizer."""
    rng = random.Random("laneway-real-calibration")
    short, long_ = words.text(rng, 200), words.text(rng, 2200)

    async def tokenize(text):
        status, body = await fetch(url + "/tokenize", "POST",
                                   {"model": model, "prompt": text, "add_special_tokens": False})
        if status != 200:
            raise HttpError(f"/tokenize answered {status}")
        return json.loads(body)["count"]

    async def usage(text):
        status, body = await fetch(url + "/v1/chat/completions", "POST", {
            "model": model, "messages": [{"role": "user", "content": f"[calibration] {text}"}],
            "max_tokens": 1, "stream": False}, timeout=60)
        if status != 200:
            raise HttpError(f"/v1/chat/completions answered {status}")
        return json.loads(body)["usage"]["prompt_tokens"]

    for method, count in (("tokenize", tokenize), ("usage", usage)):
        try:
            a, b = await count(short), await count(long_)
            return {"method": method, "url": url, "tokens_per_word": (b - a) / 2000}
        except (HttpError, OSError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            continue
    return {"method": "assumed", "url": url, "tokens_per_word": 1.3}


WARM_UP_STREAMS = 16


async def warm_up(a, words: Words, calibration, model):
    """Two waves of WARM_UP_STREAMS streamed chats straight to each replica, salted apart from
    every run and not recorded: a freshly started engine answers its first requests slower
    (the first target of round 1 met it cold, and only that one). Returns the seconds taken."""
    started = time.perf_counter()
    n_words = words_for(max(a.input_tokens or 0, 400), calibration)

    async def one_replica(url):
        run = Run(a, "warm-up", url, 0, model)
        for wave in range(2):
            await asyncio.gather(*(
                stream_chat(run, [{"role": "user",
                                   "content": f"{run.salt(f'w{wave}-{i}')} "
                                              f"{words.text(random.Random(f'warm-{wave}-{i}'), n_words)}"}],
                            32, {"id": f"warm-{wave}-{i}"})
                for i in range(WARM_UP_STREAMS)))
        await run.pool.close()

    await asyncio.gather(*(one_replica(url) for url in a.replicas))
    return time.perf_counter() - started


REPLICA_METRICS = ("vllm:request_success_total", "vllm:prefix_cache_queries_total",
                   "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total")


async def scrape(replicas):
    """Per replica, the sums over label sets of the counters above (None if unreachable)."""
    out = []
    for url in replicas:
        try:
            status, body = await fetch(url + "/metrics", timeout=5)
        except (HttpError, OSError, asyncio.TimeoutError):
            out.append(None)
            continue
        sums = dict.fromkeys(REPLICA_METRICS, 0.0)
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in sums:
                try:
                    sums[name] += float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
        out.append(sums if status == 200 else None)
    return out


def replica_deltas(before, after):
    deltas = []
    for b, a in zip(before, after):
        if b is None or a is None:
            deltas.append(None)
        else:
            deltas.append({name.removeprefix("vllm:"): a[name] - b[name] for name in REPLICA_METRICS})
    return deltas


# ---------------------------------------------------------------------------- summaries


def percentile(values, q):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize(run: Run, planned, duration, deltas):
    a = run.args
    ok = [r for r in run.records if r["error"] is None]
    ttft = [r["ttft"] for r in ok]
    tpot = [r["tpot"] for r in ok if r["tpot"] is not None]
    good = [r for r in ok if r["ttft"] <= a.slo_ttft_ms / 1000
            and (r["tpot"] is None or r["tpot"] <= a.slo_tpot_ms / 1000)]
    prompt = sum(r["prompt_tokens"] or 0 for r in ok)
    cached = sum(r["cached_tokens"] or 0 for r in ok)
    completion = sum(r["completion_tokens"] or 0 for r in ok)
    errors = {}
    for r in run.records:
        if r["error"]:
            key = r["error"][:80]
            errors[key] = errors.get(key, 0) + 1
    split, entries = {}, {}
    for r in ok:
        replica = r.get("laneway_replica") or r.get("sim_replica")
        if replica:
            split[replica] = split.get(replica, 0) + 1
        if r.get("laneway_entry"):
            key = f"{r['laneway_entry']}/{r.get('laneway_strategy', '?')}"
            entries[key] = entries.get(key, 0) + 1
    summary = {
        "target": run.target, "round": run.round, "planned": planned, "sent": len(run.records),
        "ok": len(ok), "errors": errors, "duration_s": duration,
        "ttft_p50": percentile(ttft, 0.5), "ttft_p90": percentile(ttft, 0.9),
        "ttft_p99": percentile(ttft, 0.99),
        "tpot_p50": percentile(tpot, 0.5), "tpot_p90": percentile(tpot, 0.9),
        "e2e_p50": percentile([r["e2e"] for r in ok], 0.5),
        "e2e_p90": percentile([r["e2e"] for r in ok], 0.9),
        "goodput": len(good) / planned if planned else None,
        "requests_per_s": len(ok) / duration if duration else None,
        "output_tokens_per_s": completion / duration if duration else None,
        "prompt_tokens_mean": prompt / len(ok) if ok else None,
        "completion_tokens_mean": completion / len(ok) if ok else None,
        "hit_ratio": cached / prompt if prompt else None,
        "connections_opened": run.pool.opened,
        "replicas_by_header": split or None,
        "laneway_entries": entries or None,
        "replica_metrics": deltas,
    }
    if deltas and all(d is not None for d in deltas):
        queries = sum(d["prefix_cache_queries_total"] for d in deltas)
        summary["engine_hit_ratio"] = (sum(d["prefix_cache_hits_total"] for d in deltas) / queries
                                       if queries else None)
        summary["replica_requests"] = [int(d["request_success_total"]) for d in deltas]
    return summary


def workload_params(a):
    common = {"seed": a.seed, "rounds": a.rounds, "run_id": a.run_id}
    if a.workload == "conv":
        shape = {"conversations": a.clients, "turns": a.turns, "question_tokens": a.input_tokens,
                 "answer_tokens": a.output_tokens, "ramp_up_s": a.ramp_up,
                 "session": not a.no_session, "system_tokens": a.system_tokens,
                 "think_s": a.think_s}
    elif a.workload == "prefix":
        shape = {"groups": a.groups, "context_tokens": a.context_tokens,
                 "question_tokens": a.input_tokens, "answer_tokens": a.output_tokens,
                 "rate": a.rate, "requests": a.requests, "hot_share": a.hot_share}
    elif a.workload == "mixed":
        shape = {"mix": a.mix, "rate": a.rate, "requests": a.requests}
    else:
        shape = {"input_tokens": a.input_tokens, "output_tokens": a.output_tokens,
                 "clients": a.clients, "requests": a.requests, "ramp_up_s": a.ramp_up}
    return {**shape, **common}


# ---------------------------------------------------------------------------------- main

DEFAULTS = {
    "conv": {"clients": 16, "turns": 5, "input_tokens": 400, "output_tokens": 64},
    "prefix": {"groups": 8, "context_tokens": 3000, "input_tokens": 100, "output_tokens": 32,
               "rate": 4.0, "requests": 150},
    "mixed": {"rate": 1.5, "requests": 100},
    "closed": {"clients": 16, "input_tokens": 128, "output_tokens": 16, "requests": 400},
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", required=True, choices=sorted(DEFAULTS))
    p.add_argument("--target", action="append", required=True, metavar="NAME=URL")
    p.add_argument("--name", help="label of the workload in the output (default: --workload)")
    p.add_argument("--description", default="", help="one line shown above the table")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=47)
    p.add_argument("--run-id", default=format(int(time.time()) & 0xFFFFFF, "06x"),
                   help="part of every salt, so a rerun on the same replicas starts cold")
    p.add_argument("--clients", type=int, help="conv: conversations; closed: clients")
    p.add_argument("--turns", type=int)
    p.add_argument("--no-session", action="store_true",
                   help="conv: send no x-session-id or user (the prompt alone ties the turns)")
    p.add_argument("--system-tokens", type=int, default=0,
                   help="conv: a system prompt of this many tokens shared by every conversation")
    p.add_argument("--think-s", type=float, default=0.0,
                   help="conv: mean seconds a user thinks between turns (exponential, seeded)")
    p.add_argument("--input-tokens", type=int, help="conv/prefix: question; closed: prompt")
    p.add_argument("--output-tokens", type=int)
    p.add_argument("--groups", type=int)
    p.add_argument("--context-tokens", type=int)
    p.add_argument("--hot-share", type=float, default=0.0,
                   help="prefix: share of requests sent to group 0 (0: every group alike)")
    p.add_argument("--rate", type=float, help="prefix/mixed: Poisson arrivals per second")
    p.add_argument("--requests", type=int)
    p.add_argument("--mix", default="0.7:500/100,0.3:4000/200", help="mixed: WEIGHT:IN/OUT,...")
    p.add_argument("--ramp-up", type=float, default=0.0, help="conv/closed: clients start over S s")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=50.0)
    p.add_argument("--model", help="default: the first of the calibration URL's /v1/models")
    p.add_argument("--calibrate-url", help="a replica (for /tokenize); default: the first target")
    p.add_argument("--replicas", default="", help="URL,URL: replicas whose /metrics are read around each run")
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--run-timeout", type=float, default=900.0, help="one target's round at most")
    p.add_argument("--pause", type=float, default=2.0, help="seconds of quiet between runs")
    p.add_argument("--no-warm-up", action="store_true",
                   help="skip the warm-up of each --replicas URL before the first round")
    p.add_argument("--json", required=True)
    p.add_argument("--markdown")
    a = p.parse_args(argv)
    for key, value in DEFAULTS[a.workload].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.name = a.name or a.workload
    if not 0.0 <= a.hot_share <= 1.0:
        p.error(f"--hot-share wants a share between 0 and 1, not {a.hot_share}")
    a.targets = []
    for spec in a.target:
        name, sep, url = spec.partition("=")
        urls = url.split("+")
        if not sep or not all(u.startswith("http://") for u in urls):
            p.error(f"--target wants NAME=http://HOST:PORT[+http://HOST:PORT...], not {spec!r}")
        a.targets.append((name, "+".join(u.rstrip("/") for u in urls)))
    a.replicas = [u.rstrip("/") for u in a.replicas.split(",") if u]
    return a


def log(message):
    print(f"[real {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def round_order(targets, round_no):
    """The targets in the order round `round_no` (from 1) runs them: turned by one each round.

    In one fixed order, whatever a place in the round brings (the first after the pause, the
    one after a given target) fell on one target every round; over as many rounds as there are
    targets, each now takes each place once."""
    turn = (round_no - 1) % len(targets)
    return targets[turn:] + targets[:turn]


async def main(argv):
    a = parse_args(argv)
    words = Words()
    calibrate_url = a.calibrate_url or a.targets[0][1].split("+")[0]
    model = a.model or await discover_model(calibrate_url)
    calibration = await calibrate(calibrate_url, model, words)
    log(f"{a.name}: model {model}, {calibration['tokens_per_word']:.3f} tokens/word "
        f"({calibration['method']} at {calibrate_url})")
    doc = {"workload": a.workload, "name": a.name, "description": a.description,
           "params": workload_params(a), "slo": {"ttft_ms": a.slo_ttft_ms, "tpot_ms": a.slo_tpot_ms},
           "model": model, "calibration": calibration, "targets": [t for t, _ in a.targets],
           "replicas": a.replicas, "command": " ".join(["real_client.py", *argv]),
           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "runs": [], "requests": []}
    if a.replicas and not a.no_warm_up:
        doc["warm_up_s"] = round(await warm_up(a, words, calibration, model), 1)
        log(f"{a.name}: replicas warmed up in {doc['warm_up_s']} s "
            f"({2 * WARM_UP_STREAMS} streams each, not recorded)")
        # The quiet every later run starts after: without it the first target met replicas
        # still reporting the warm-up's streams running (a fresh gateway's first burst of
        # conversations went 10/6 in half its starts; with it 8/8 in four of four).
        await asyncio.sleep(a.pause)
    for round_no in range(1, a.rounds + 1):
        for target, url in round_order(a.targets, round_no):
            run = Run(a, target, url, round_no, model)
            before = await scrape(a.replicas)
            run.started = time.perf_counter()
            try:
                planned = await asyncio.wait_for(run_workload(run, words, calibration), a.run_timeout)
            except asyncio.TimeoutError:
                planned = None
                log(f"{a.name}: {target} round {round_no} cut at {a.run_timeout} s")
            duration = time.perf_counter() - run.started
            await run.pool.close()
            if planned is None:
                planned = {"conv": a.clients * a.turns}.get(a.workload, a.requests)
            summary = summarize(run, planned, duration, replica_deltas(before, await scrape(a.replicas)))
            doc["runs"].append(summary)
            doc["requests"].extend(run.records)
            log(f"{a.name}: {target} round {round_no}: " + real_table.one_line(summary))
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)
            await asyncio.sleep(a.pause)
    table = real_table.render(doc)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
