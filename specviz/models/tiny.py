"""The tiny-random pair: two small Llamas with seeded random weights and a tokenizer made in code.

Nothing is downloaded. Tests use it, and so can anyone offline who wants to see the machinery run
(the text it writes is noise: the weights are random).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specviz.models.devices import HOST, moved
from specviz.paths import ASSETS

if TYPE_CHECKING:
    from specviz.models.draft import ReducedVocabDraft
    from specviz.models.modelpair import ModelPair

TINY_VOCAB = 512  # byte-level BPE: 256 bytes + 3 special tokens + 253 merges
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_config(hidden: int, layers: int, heads: int, kv_heads: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=2048,
        initializer_range=0.1,  # larger than usual so that greedy choices are not near-ties
        bos_token_id=None,
        eos_token_id=0,  # "<|endoftext|>": the trainer gives the special tokens ids 0, 1, 2
        pad_token_id=None,
        tie_word_embeddings=False,
    )


TARGET_CONFIG = {"hidden": 64, "layers": 4, "heads": 4, "kv_heads": 2}
DRAFT_CONFIG = {"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 1}


def tiny_model(seed: int, **shape: int) -> LlamaForCausalLM:
    """A Llama with seeded random weights (same seed and shape -> same weights)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(**shape))
    return model.eval()


def perturbed_copy(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """The same model with Gaussian noise of std `noise` added to every weight (a 'draft' that
    agrees with the target often but not always)."""
    copy = LlamaForCausalLM(model.config).eval()
    copy.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * noise)
    return copy


def reduced_copy(model: LlamaForCausalLM, noise: float, seed: int, drop_every: int = 4) -> ReducedVocabDraft:
    """The target's own weights in a `ReducedVocabDraft` whose head leaves out every `drop_every`-th
    token id (q = 0 there), plus Gaussian noise of std `noise`: a draft that agrees with the target
    except where the target's choice is outside its head."""
    from specviz.models.draft import ReducedVocabDraft, reduced_config

    c = model.config
    vocab_ids = torch.tensor([i for i in range(c.vocab_size) if i % drop_every != drop_every - 1])
    config = reduced_config(
        c,
        hidden=c.hidden_size,
        layers=c.num_hidden_layers,
        heads=c.num_attention_heads,
        kv_heads=c.num_key_value_heads or c.num_attention_heads,  # Llama's reading of None
        intermediate=c.intermediate_size,
        head_vocab=len(vocab_ids),
        embed_rank=c.hidden_size,
    )
    draft = ReducedVocabDraft(config, vocab_ids).eval()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(("lm_head", "model.embed_tokens"))}
    state |= {
        "model.embed_tokens.table.weight": model.model.embed_tokens.weight,
        "model.embed_tokens.up.weight": torch.eye(c.hidden_size),
        "lm_head.proj.weight": model.lm_head.weight[vocab_ids],
        "lm_head.vocab_ids": vocab_ids,
    }
    draft.load_state_dict(state)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * noise)
    return draft


@lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with TINY_VOCAB tokens, trained in a few ms on the shipped prompt files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [json.loads(line)["question"] for line in (ASSETS / "prompts" / "gsm8k_test.jsonl").open()][:400]
    texts += [json.loads(line)["prompt"] for line in (ASSETS / "prompts" / "humaneval.jsonl").open()][:80]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    assert bpe.get_vocab_size() == TINY_VOCAB
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_pair(
    device: torch.device = HOST,
    dtype: torch.dtype = torch.float32,
    draft: str = "random",
    noise: float = 0.003,
) -> ModelPair:
    """The tiny-random pair. draft: "random" (an independent smaller model: the offline demo),
    "self" (the target drafts for itself: every token accepted), "perturbed" (a noisy copy of
    the target: some tokens accepted, some rejected) or "reduced" (a noisy copy whose head leaves
    out a quarter of the vocabulary, as the default draft's does). Tests use all four."""
    from specviz.models.modelpair import ModelPair, describe

    target = tiny_model(seed=1, **TARGET_CONFIG)
    drafts = {
        "random": lambda: tiny_model(seed=2, **DRAFT_CONFIG),
        "self": lambda: target,
        "perturbed": lambda: perturbed_copy(target, noise=noise, seed=3),
        "reduced": lambda: reduced_copy(target, noise=noise, seed=4),
    }
    draft_model = drafts[draft]()
    target, draft_model = moved(target, device, dtype), moved(draft_model, device, dtype)
    return ModelPair(
        name="tiny-random" if draft == "random" else f"tiny-{draft}",
        target=target,
        draft=draft_model,
        tokenizer=tiny_tokenizer(),
        chat=False,
        eos_token_ids=(0,),
        info=describe("tiny-random target (4 x 64)", f"tiny {draft} draft", target, draft_model, device, dtype),
    )
