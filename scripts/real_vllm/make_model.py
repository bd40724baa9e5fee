"""Makes a random-weight Llama and its tokenizer for real vLLM replicas, with no model hub.

    python make_model.py OUT_DIR [--size tiny|slow] [--seed N]

The weights are random (seeded): the model says nothing useful, but a vLLM engine serves it
with its real scheduler, batching, prefix cache, API servers and metrics, which is what the
gateway is tested and measured against. Sizes:

- `tiny`: 2 layers, hidden 256, 4 heads, vocab 8,000, 65,536 positions (~6 M parameters).
- `slow`: 8 layers, hidden 512, 8 heads (same vocab and positions): a slower replica for
  heterogeneous fleets.

The tokenizer is a byte-level BPE (vocab 8,000) trained here with `tokenizers` on text
generated from the same seed, with a ChatML chat template; `<|im_end|>` ends a turn (and is
the EOS token; requests that want an exact length send `ignore_eos`). Everything is written
into a scratch folder beside OUT_DIR and renamed into place at the end, so OUT_DIR is either
complete or absent; `laneway-model.json` in it records what was made.
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile

SIZES = {
    "tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
    "slow": {"layers": 8, "hidden": 512, "heads": 8, "intermediate": 2048},
}
VOCAB = 8000
POSITIONS = 65536
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Common English words mixed with generated pseudo-words, so that both test prompts in
# English and random words tokenize into a few tokens each.
ENGLISH = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an each "
    "which she do how their if will up other about out many then them these so some her "
    "would make like him into time has look two more write go see number no way could people "
    "my than first water been call who oil its now find long down day did get come made may "
    "part request replica gateway token prompt cache prefix stream model answer question user "
    "assistant system hello world test long short debug session conversation context"
).split()


def training_text(seed: int, words: int = 600_000) -> list:
    """Deterministic pseudo-text: sentences of English and generated words, digits, newlines."""
    rng = random.Random(seed)
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    pseudo = [
        "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 4)))
        for _ in range(4000)
    ]
    lines, line = [], []
    for _ in range(words):
        roll = rng.random()
        if roll < 0.45:
            word = rng.choice(ENGLISH)
        elif roll < 0.93:
            word = rng.choice(pseudo)
        else:
            word = str(rng.randint(0, 99999))
        if rng.random() < 0.1:
            word = word.capitalize()
        line.append(word)
        if rng.random() < 0.08:
            line[-1] += rng.choice(".,;:?!")
        if len(line) >= rng.randint(8, 30):
            lines.append(" ".join(line))
            line = []
    return lines


def make_tokenizer(seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(seed), trainer=trainer)
    if tokenizer.get_vocab_size() > VOCAB:
        raise SystemExit(f"tokenizer vocab {tokenizer.get_vocab_size()} > model vocab {VOCAB}")
    return tokenizer


def make(out_dir: str, size: str, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    shape = SIZES[size]
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".making-", dir=parent)
    try:
        raw = make_tokenizer(seed)
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=raw,
            bos_token="<|endoftext|>",
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
        )
        tokenizer.chat_template = CHATML
        tokenizer.model_max_length = POSITIONS
        tokenizer.save_pretrained(scratch)

        ids = {token: raw.token_to_id(token) for token in SPECIAL_TOKENS}
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=shape["hidden"],
            intermediate_size=shape["intermediate"],
            num_hidden_layers=shape["layers"],
            num_attention_heads=shape["heads"],
            num_key_value_heads=shape["heads"],
            max_position_embeddings=POSITIONS,
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            tie_word_embeddings=False,
        )
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        model.generation_config.eos_token_id = ids["<|im_end|>"]
        model.generation_config.bos_token_id = ids["<|endoftext|>"]
        model.generation_config.pad_token_id = ids["<|endoftext|>"]
        model.save_pretrained(scratch, safe_serialization=True)

        params = sum(p.numel() for p in model.parameters())
        stamp = {"size": size, "seed": seed, "parameters": params, "vocab": VOCAB, **shape}
        with open(os.path.join(scratch, "laneway-model.json"), "w") as f:
            json.dump(stamp, f, indent=2)
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.rename(scratch, out_dir)
        print(f"model {size}: {params / 1e6:.1f} M parameters, seed {seed}, in {out_dir}")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--seed", type=int, default=47)
    args = parser.parse_args()
    make(args.out_dir, args.size, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
