"""Fits a simulator profile's engine costs to one replica's single-request figures
(single_requests.py's JSON), keeping the profile's mechanism and every other number.
Standard library only.

    fit_profile.py --figures single-real.json --profile config/profiles/vllm-cpu-tiny.toml \
        --out fitted.toml

The engine's speed on one host is not the next host's: on these machines a real replica's
TTFT at 8,192 tokens was 1.16-1.21 s one day and 0.35-0.38 s another, its short prompts
and TPOT level. A workload comparison between the simulator and the real engine only says
something about the mechanism when the simulator runs at the speed the real engine had that
hour, so benches/sim_vs_real.sh fits these from its own single-request run:

- from TPOT by streams (128-token prompts, 128 tokens each: a mean context of 192) and by
  context (one stream): `step_base_us`, `decode_us_per_seq` and
  `decode_ns_per_context_token`, where a step with `s` streams over context `c` each takes
  `step_base + s * (decode_per_seq + decode_per_context * c)`;
- from TTFT by prompt size, one request alone: `prefill_us_per_token` and
  `attention_ns_per_token_pair` after the profile's API costs and one step base per prefill
  chunk, the chunks as the engine cuts them (`max_num_batched_tokens`).

Least squares; a cost that fits below zero is held at zero and the others fitted again.
Prints the fitted values and writes the profile with them (`--out`).
"""

import argparse
import json
import re
import tomllib

STREAM_PROMPT_TOKENS = 128
STREAM_OUTPUT_TOKENS = 128


def solve(rows: list[list[float]], values: list[float]) -> list[float]:
    """Least squares by the normal equations (a few unknowns, well apart in scale)."""
    n = len(rows[0])
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    vector = [sum(r[i] * v for r, v in zip(rows, values)) for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda row: abs(matrix[row][col]))
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        vector[col], vector[pivot] = vector[pivot], vector[col]
        if abs(matrix[col][col]) < 1e-18:
            raise ValueError("the figures cannot tell these costs apart")
        for row in range(col + 1, n):
            factor = matrix[row][col] / matrix[col][col]
            for j in range(col, n):
                matrix[row][j] -= factor * matrix[col][j]
            vector[row] -= factor * vector[col]
    solution = [0.0] * n
    for row in reversed(range(n)):
        rest = sum(matrix[row][j] * solution[j] for j in range(row + 1, n))
        solution[row] = (vector[row] - rest) / matrix[row][row]
    return solution


def non_negative(rows: list[list[float]], values: list[float]) -> list[float]:
    """Least squares with every unknown >= 0: an unknown fitted below zero is held at zero."""
    free = list(range(len(rows[0])))
    while True:
        fitted = solve([[r[i] for i in free] for r in rows], values)
        result = [0.0] * len(rows[0])
        for index, value in zip(free, fitted):
            result[index] = value
        negative = [index for index, value in zip(free, fitted) if value < 0]
        if not negative:
            return result
        free = [index for index in free if index not in negative]
        if not free:
            return result


def fit_decode(figures: dict) -> dict:
    """step_base_us, decode_us_per_seq, decode_ns_per_context_token from TPOT figures (ms)."""
    rows, values = [], []
    mean_context = STREAM_PROMPT_TOKENS + STREAM_OUTPUT_TOKENS / 2
    for streams, tpot_ms in figures["tpot_ms"].items():
        if tpot_ms:
            s = float(streams)
            rows.append([1.0, s, s * mean_context / 1000.0])
            values.append(tpot_ms * 1000.0)
    for context, tpot_ms in figures.get("tpot_by_context_ms", {}).items():
        if tpot_ms:
            rows.append([1.0, 1.0, (float(context) + STREAM_OUTPUT_TOKENS / 2) / 1000.0])
            values.append(tpot_ms * 1000.0)
    step, per_seq, per_context = non_negative(rows, values)
    return {"step_base_us": step, "decode_us_per_seq": per_seq,
            "decode_ns_per_context_token": per_context}


def chunks(tokens: int, budget: int) -> list[tuple[int, int]]:
    """(position, size) of each prefill chunk of a prompt alone on the engine."""
    return [(start, min(budget, tokens - start)) for start in range(0, tokens, budget)]


def fit_prefill(figures: dict, profile: dict, step_base_us: float) -> dict:
    """prefill_us_per_token and attention_ns_per_token_pair from TTFT figures (ms)."""
    engine, api = profile["engine"], profile["api"]
    rows, values = [], []
    for size, ttft_ms in figures["ttft_ms"].items():
        tokens = int(size)
        parts = chunks(tokens, int(engine["max_num_batched_tokens"]))
        fixed = (api["request_overhead_us"] + api["tokenize_us_per_token"] * tokens
                 + api["per_chunk_us"] + step_base_us * len(parts))
        pairs = sum(size * (start + size / 2) for start, size in parts)
        rows.append([float(tokens), pairs / 1000.0])
        values.append(ttft_ms * 1000.0 - fixed)
    per_token, per_pair = non_negative(rows, values)
    return {"prefill_us_per_token": per_token, "attention_ns_per_token_pair": per_pair}


def with_engine_values(text: str, values: dict) -> str:
    """The profile's text with each `key = value` line of [engine] replaced (or added)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "[engine]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    for key, value in values.items():
        pattern = re.compile(rf"^{key}\s*=")
        found = [i for i in range(start + 1, end) if pattern.match(lines[i])]
        line = f"{key} = {value:.1f}"
        if found:
            lines[found[0]] = line
        else:
            lines.insert(end, line)
            end += 1
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", required=True, help="single_requests.py's JSON")
    parser.add_argument("--profile", required=True, help="the profile TOML to refit")
    parser.add_argument("--out", required=True, help="where the fitted profile goes")
    args = parser.parse_args()
    with open(args.figures, encoding="utf-8") as file:
        figures = json.load(file)
    with open(args.profile, encoding="utf-8") as file:
        profile_text = file.read()
    profile = tomllib.loads(profile_text)
    decode = fit_decode(figures)
    prefill = fit_prefill(figures, profile, decode["step_base_us"])
    fitted = decode | prefill
    header = (f"# Fitted by benches/peers/fit_profile.py to {figures.get('name', '?')}'s figures "
              f"({args.figures}); the rest as {args.profile}.\n")
    text = with_engine_values(profile_text, fitted)
    with open(args.out, "w", encoding="utf-8") as out:
        out.write(header + text)
    print(json.dumps({key: round(value, 2) for key, value in fitted.items()}))


if __name__ == "__main__":
    main()
