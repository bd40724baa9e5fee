"""The official `openai` client, streaming and not, through `laneway serve` in its default
mode (four simulated replicas in-process), on ports the OS picks."""

import openai
import pytest
from openai import OpenAI

SERVE_ARGS = ["serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
MESSAGES = [{"role": "user", "content": "Say hello through the gateway."}]


@pytest.fixture
def client(launch_laneway):
    url = launch_laneway(SERVE_ARGS)
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_chat_completion(client):
    raw = client.chat.completions.with_raw_response.create(
        model="sim", messages=MESSAGES, max_tokens=8
    )
    assert raw.headers["x-laneway-entry"] == "short"
    assert raw.headers["x-laneway-strategy"] == "force_close"
    assert raw.headers["x-laneway-replica"].startswith("sim-")
    completion = raw.parse()
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.usage.completion_tokens == 8


def test_streamed_chat_completion_with_usage(client):
    stream = client.chat.completions.create(
        model="sim",
        messages=MESSAGES,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(pieces).strip()
    assert usage is not None and usage.completion_tokens == 8


def test_streamed_completion(client):
    stream = client.completions.create(model="sim", prompt="hello", max_tokens=5, stream=True)
    texts = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert len(texts) == 5


def test_long_prompt_takes_the_long_entry(client):
    prompt = "abc " * 3000
    raw = client.completions.with_raw_response.create(model="sim", prompt=prompt, max_tokens=2)
    assert raw.headers["x-laneway-entry"] == "long"
    assert raw.headers["x-laneway-strategy"] == "force_close"
    assert raw.parse().usage.prompt_tokens == 3000


def test_errors_reach_the_client_in_openai_shape(client):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="sim",
            messages=MESSAGES,
            max_tokens=2,
            extra_headers={"x-laneway-entry": "medium"},
        )
    assert raised.value.status_code == 400
    assert "medium" in raised.value.message


def test_sigterm_drains_an_open_stream_then_exits_cleanly():
    import signal

    from conftest import start_laneway, stop_laneway

    url, process = start_laneway(SERVE_ARGS)
    try:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        stream = client.chat.completions.create(
            model="sim", messages=MESSAGES, max_tokens=40, stream=True
        )
        chunks = iter(stream)
        first = next(chunks)
        assert first.choices
        process.send_signal(signal.SIGTERM)
        rest = [chunk for chunk in chunks if chunk.choices]
        # Role chunk first, then 40 tokens: the stream finished after the signal.
        assert len(rest) == 40
        assert process.wait(timeout=30) == 0
    finally:
        stop_laneway(process)
