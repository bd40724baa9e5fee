"""Single-request latency of one replica, the figures a simulator profile is fitted to:
TTFT by prompt size (one request at a time, each prompt salted so that none hits the
prefix cache) and TPOT by the number of streams decoding at once and by the context they
decode over. Standard library only.

    single_requests.py --url http://127.0.0.1:8000 --name real [--model tiny] [--json FILE]

Prints one JSON object: {"name", "ttft_ms": {tokens: median}, "tpot_ms": {streams: median},
"tpot_by_context_ms": {prompt tokens: one stream's median},
"tpot_streams_over_context_ms": {"STREAMSxTOKENS": median}, "itl_cv"}: TPOT by streams is over
128-token prompts; itl_cv is the spread (standard deviation over mean) of the gaps between one
stream's tokens, alone on the replica, over three 128-token streams (a simulator profile's
`engine.step_jitter`).
Prompt sizes are reached by the replica's own count of a probe text's tokens (its usage). Every loop is bounded; every request has a timeout.
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse
import urllib.request

PROMPT_SIZES = (128, 1024, 4096, 8192)
STREAM_COUNTS = (1, 4, 16)
# One stream's TPOT by the context it decodes over: what a decode step costs per token of
# KV a sequence attends to.
CONTEXT_SIZES = (128, 1024, 4096, 8192)
# Many streams at once over a conversation's context: (streams, prompt tokens).
STREAMS_OVER_CONTEXT = ((8, 1400), (16, 1400))
REPEATS = 3
TIMEOUT_S = 120
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo")


def text_of(words: int, salt: str) -> str:
    body = " ".join(WORDS[(i * 7 + len(salt)) % len(WORDS)] for i in range(words))
    return f"[{salt}] {body}"


def tokens_per_word(url: str, model: str) -> float:
    """Prompt tokens per word of the probe text, as the replica's own usage counts them (the
    same way on a real engine and on the simulator)."""
    words = 400
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps({"model": model, "prompt": text_of(words, "probe"), "max_tokens": 1}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return json.load(response)["usage"]["prompt_tokens"] / (words + 1)


def stream(url: str, model: str, prompt: str, max_tokens: int) -> tuple[float, float, int, list]:
    """One streamed completion: (ttft_s, e2e_s, completion tokens, gaps between its text
    events in seconds)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=TIMEOUT_S)
    body = json.dumps({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0,
    })
    start = time.perf_counter()
    connection.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {response.read()[:200]!r}")
    first, last, tokens, gaps = None, None, 0, []
    for line in response:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        event = json.loads(line[6:])
        if event.get("choices") and event["choices"][0].get("text"):
            now = time.perf_counter()
            if first is None:
                first = now
            else:
                gaps.append(now - last)
            last = now
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
    end = time.perf_counter()
    connection.close()
    return (first or end) - start, end - start, tokens, gaps


def streams_tpot(url: str, model: str, name: str, per_word: float, count: int,
                 prompt_tokens: int) -> float | None:
    """Median TPOT (ms) of `count` 128-token streams started together over salted prompts of
    about `prompt_tokens` tokens."""
    results: list[float] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        salt = f"{name}-tpot-{count}-{prompt_tokens}-{index}-{time.time_ns()}"
        first, e2e, tokens, _ = stream(url, model, text_of(int(prompt_tokens / per_word), salt), 128)
        with lock:
            results.append((e2e - first) / max(tokens - 1, 1) * 1000)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    return round(statistics.median(results), 2) if results else None


def measure(url: str, model: str, name: str) -> dict:
    per_word = tokens_per_word(url, model)
    ttft = {}
    for size in PROMPT_SIZES:
        samples = []
        for repeat in range(REPEATS):
            prompt = text_of(int(size / per_word), f"{name}-{size}-{repeat}-{time.time_ns()}")
            samples.append(stream(url, model, prompt, 1)[0] * 1000)
        ttft[size] = round(statistics.median(samples), 1)
    tpot = {count: streams_tpot(url, model, name, per_word, count, 128) for count in STREAM_COUNTS}
    tpot_streams_over_context = {
        f"{count}x{size}": streams_tpot(url, model, name, per_word, count, size)
        for count, size in STREAMS_OVER_CONTEXT
    }
    # One stream at a time over each context, the median of the REPEATS that answered.
    tpot_by_context = {}
    for size in CONTEXT_SIZES:
        samples = [tpot for _ in range(REPEATS)
                   if (tpot := streams_tpot(url, model, name, per_word, 1, size)) is not None]
        tpot_by_context[size] = statistics.median(samples) if samples else None
    gaps = []
    for repeat in range(REPEATS):
        prompt = text_of(int(128 / per_word), f"{name}-itl-{repeat}-{time.time_ns()}")
        gaps += stream(url, model, prompt, 128)[3]
    itl_cv = round(statistics.pstdev(gaps) / statistics.mean(gaps), 3) if len(gaps) > 1 else None
    return {"name": name, "tokens_per_word": round(per_word, 3), "ttft_ms": ttft, "tpot_ms": tpot,
            "tpot_by_context_ms": tpot_by_context,
            "tpot_streams_over_context_ms": tpot_streams_over_context, "itl_cv": itl_cv}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--json")
    args = parser.parse_args()
    result = measure(args.url.rstrip("/"), args.model, args.name)
    text = json.dumps(result)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
