"""Known-good public target/draft pairs (they share a tokenizer). Used by the app's pair picker
and the benchmark's --pair; each needs internet once to download."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PairPreset:
    name: str
    target: str  # hub id of the target model
    draft: str  # hub id of the draft model (same tokenizer)
    note: str  # what it is good for, shown in the app


PRESETS: dict[str, PairPreset] = {
    p.name: p
    for p in [
        PairPreset(
            "smollm2-1.7b/135m",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "SmolLM2 family, c ~ 0.1; a good first GPU demo",
        ),
        PairPreset(
            "smollm2-1.7b/360m",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            "HuggingFaceTB/SmolLM2-360M-Instruct",
            "SmolLM2 family, higher acceptance, costlier draft",
        ),
        PairPreset(
            "smollm2-360m/135m",
            "HuggingFaceTB/SmolLM2-360M-Instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "small enough for a CPU-only Space",
        ),
        PairPreset(
            "qwen2.5-1.5b/0.5b",
            "Qwen/Qwen2.5-1.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "Qwen2.5 instruct pair",
        ),
        PairPreset(
            "qwen2.5-7b/0.5b",
            "Qwen/Qwen2.5-7B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "a large target: needs a GPU with ~16 GB (bfloat16)",
        ),
        PairPreset(
            "gpt2-large/gpt2", "openai-community/gpt2-large", "openai-community/gpt2", "the classic base-model pair"
        ),
    ]
}
