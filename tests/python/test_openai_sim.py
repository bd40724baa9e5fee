"""The official `openai` client against `laneway sim`: chat and text completions, streamed
(with usage) and not, model listing and errors."""

import openai
import pytest


@pytest.fixture
def client(sim_url):
    return openai.OpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0)


def test_lists_the_served_model(client):
    models = client.models.list()
    assert [model.id for model in models.data] == ["sim-tiny"]


def test_chat_completion(client):
    raw = client.chat.completions.with_raw_response.create(
        model="sim-tiny",
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=5,
    )
    assert raw.headers["x-sim-replica"]
    assert raw.headers["x-sim-api-worker"] == "0"
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert len(choice.message.content.split()) == 5
    assert completion.usage.completion_tokens == 5
    assert completion.usage.prompt_tokens > 0


def test_streamed_chat_with_usage(client):
    stream = client.chat.completions.create(
        model="sim-tiny",
        messages=[{"role": "user", "content": "Stream something."}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert len(content) == 6
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishing[-1] == "length"
    assert all(reason is None for reason in finishing[:-1])
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens == 6
    assert usage_chunk.usage.total_tokens == usage_chunk.usage.prompt_tokens + 6


def test_text_completion(client):
    completion = client.completions.create(model="sim-tiny", prompt="Once upon", max_tokens=4)
    assert completion.choices[0].finish_reason == "length"
    assert len(completion.choices[0].text.split()) == 4
    assert completion.usage.prompt_tokens == 3


def test_streamed_text_completion(client):
    stream = client.completions.create(
        model="sim-tiny",
        prompt="Once upon a time",
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) == 3
    assert chunks[-1].usage.completion_tokens == 3


def test_too_long_prompt_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model="sim-tiny", prompt="word " * 5000, max_tokens=4)
    assert "maximum context length" in str(error.value)
