"""Makes the test tokenizer of `model_tokenizer.rs`'s tests and the token ids Hugging Face
gives its prompts, which the gateway must reproduce.

    ~/.cache/laneway-vllm/venv/bin/python tests/data/tokenizer/make.py

Writes into this folder: `model/` (a byte-level BPE of 600 tokens trained as
scripts/real_vllm/make_model.py trains the real-engine model's, its tokenizer_config.json and
a chat template that uses what real templates use: trimmed and left-stripped blocks, a
system message taken apart, `.strip()`, loop controls, `bos_token`, `raise_exception`) and
`expected.json` (per prompt: the text or messages, and the ids of `apply_chat_template(...,
add_generation_prompt=True)` or of `encode(text)`).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts", "real_vllm"))
import make_model  # noqa: E402

TEMPLATE = """{{ bos_token }}
{% if messages[0]['role'] == 'system' %}
    {% set system = messages[0]['content'] %}
    {% set rest = messages[1:] %}
{% else %}
    {% set system = 'You are a helpful assistant.' %}
    {% set rest = messages %}
{% endif %}
<|im_start|>system
{{ system | trim }}<|im_end|>
{% for message in rest %}
    {% if message['role'] not in ['user', 'assistant'] %}
        {{ raise_exception('unknown role ' + message['role']) }}
    {% endif %}
    {% if message['content'].strip() == '' %}{% continue %}{% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'].strip() }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

PROMPTS = [
    {"messages": [{"role": "user", "content": "hello world, what is the cache?"}]},
    {
        "messages": [
            {"role": "system", "content": "  Answer briefly.  "},
            {"role": "user", "content": "the prefix of a long prompt\nwith two lines"},
            {"role": "assistant", "content": "  it is cached  "},
            {"role": "user", "content": "   "},
            {"role": "user", "content": "Ünïcode and digits 12345 too"},
        ]
    },
    {"text": "a completion prompt: the replica streams tokens"},
]


def main() -> int:
    from transformers import PreTrainedTokenizerFast

    make_model.VOCAB = 600
    raw = make_model.make_tokenizer(seed=49)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.chat_template = TEMPLATE
    out = os.path.join(HERE, "model")
    tokenizer.save_pretrained(out)
    for extra in ("special_tokens_map.json",):
        path = os.path.join(out, extra)
        if os.path.exists(path):
            os.remove(path)
    expected = []
    for prompt in PROMPTS:
        if "messages" in prompt:
            ids = tokenizer.apply_chat_template(
                prompt["messages"], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
        else:
            ids = tokenizer.encode(prompt["text"])
        expected.append({**prompt, "ids": list(ids)})
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in expected) + "\n]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
