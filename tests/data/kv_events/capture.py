#!/usr/bin/env python3
"""Records a real vLLM replica's KV-cache events as test data (tests/data/kv_events/).

Run with the engine's own venv (it has pyzmq), against one replica started with events on:

    scripts/real-vllm.sh serve --replicas 1 --base-port 8300 --cores 0 --kv-cache-bytes 40M -- \
        --prefix-caching-hash-algo sha256_cbor \
        --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
            "endpoint": "tcp://127.0.0.1:8357", "replay_endpoint": "tcp://127.0.0.1:8358",
            "topic": "kv"}'
    ~/.cache/laneway-vllm/venv/bin/python tests/data/kv_events/capture.py \
        --url http://127.0.0.1:8300 --events tcp://127.0.0.1:8357 --replay tcp://127.0.0.1:8358 \
        --out tests/data/kv_events/vllm-0.32.0-cpu.jsonl

What it sends, in order: a 1,000-token prompt, the same prompt again (a pure hit publishes
nothing), a chat conversation's two turns (the second extends the first), then prompts of
3,000 tokens each until the small KV cache (40 MB, about 20,000 tokens) has evicted blocks.
Then it asks the replay socket for every batch from sequence 0 on: the whole stream, which
the live subscription may have joined after its first batch. Each line of the output is
one multipart message, hex-encoded: {"source": "live"|"replay", "frames": [...]}, and a last
line {"tokenize": ...} holds /tokenize's token ids of the first prompt (for the hashing test).
"""

import argparse
import json
import random
import time
import urllib.request

import zmq


def post(url, path, body):
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def words(rng, count):
    return " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "kappa", "omega"]) + str(rng.randrange(100))
                    for _ in range(count))


def drain(sub, lines, quiet_s=1.0):
    """Reads live messages until none came for quiet_s."""
    deadline = time.monotonic() + quiet_s
    while time.monotonic() < deadline:
        if sub.poll(100):
            frames = sub.recv_multipart()
            lines.append({"source": "live", "frames": [f.hex() for f in frames]})
            deadline = time.monotonic() + quiet_s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--replay", required=True)
    p.add_argument("--model", default="tiny")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=49)
    args = p.parse_args()
    rng = random.Random(args.seed)
    context = zmq.Context()
    # vLLM's PUB socket binds only a wildcard (`tcp://*:P`) or ipc endpoint; given a host
    # it connects, so here the subscriber binds the loopback address the engine was given.
    sub = context.socket(zmq.SUB)
    sub.bind(args.events)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(1.5)  # the engine reconnects to a bound address within its retry interval
    lines = []

    def complete(prompt):
        post(args.url, "/v1/completions",
             {"model": args.model, "prompt": prompt, "max_tokens": 4, "temperature": 0})
        drain(sub, lines)

    first = words(rng, 430)
    complete(first)
    complete(first)
    conversation = [{"role": "user", "content": words(rng, 300)}]
    answer = post(args.url, "/v1/chat/completions",
                  {"model": args.model, "messages": conversation, "max_tokens": 8, "temperature": 0})
    drain(sub, lines)
    conversation += [answer["choices"][0]["message"], {"role": "user", "content": words(rng, 200)}]
    post(args.url, "/v1/chat/completions",
         {"model": args.model, "messages": conversation, "max_tokens": 8, "temperature": 0})
    drain(sub, lines)
    for _ in range(9):
        complete(words(rng, 1300))
    dealer = context.socket(zmq.DEALER)
    dealer.connect(args.replay)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    while dealer.poll(5000):
        frames = dealer.recv_multipart()
        lines.append({"source": "replay", "frames": [f.hex() for f in frames]})
        if len(frames) >= 3 and frames[2] == b"\xff" * 8:
            break
    tokens = post(args.url, "/tokenize", {"model": args.model, "prompt": first})
    with open(args.out, "w") as out:
        for line in lines:
            out.write(json.dumps(line) + "\n")
        out.write(json.dumps({"tokenize": {"prompt": first, "tokens": tokens["tokens"]}}) + "\n")
    removed = sum(1 for line in lines if "426c6f636b52656d6f766564" in "".join(line["frames"]))
    print(f"{len(lines)} messages ({removed} with BlockRemoved) -> {args.out}")


if __name__ == "__main__":
    main()
