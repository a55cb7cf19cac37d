"""Model shapes: what the cost model needs to know about a transformer, from any Hugging Face config."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "int8": 1.0, "q4": 0.5}

# Families whose MLP is two matrices (up, down); everything else is taken as gated (gate, up, down).
PLAIN_MLP = {"gpt2", "gpt_neox", "opt", "bloom", "falcon", "gptj", "phi", "gpt_bigcode", "starcoder2"}


@dataclass(frozen=True)
class ModelShape:
    name: str  # shown in the app and the figures
    n_layers: int  # transformer blocks
    hidden_size: int  # h: residual width
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (< n_heads: grouped-query attention)
    head_dim: int  # d: width of one head
    intermediate_size: int  # I: MLP width
    vocab_size: int  # V: LM-head rows
    mlp_matrices: int = 3  # m: 3 for gated MLPs (SwiGLU: gate, up, down), 2 for plain (up, down)
    tied_embeddings: bool = True  # the LM head is the input embedding (weights counted once)
    dtype: str = "bfloat16"  # weights, activations and KV cache are held in this dtype

    @property
    def bytes_per_param(self) -> float:
        return BYTES_PER_PARAM[self.dtype]

    @property
    def layer_params(self) -> int:
        """Weights of one block: QKV, output projection, MLP (norms and biases ignored)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * (self.n_heads + 2 * self.n_kv_heads) * d + self.n_heads * d * h
        return attn + self.mlp_matrices * h * self.intermediate_size

    @property
    def n_params(self) -> int:
        """All weights (norms and biases ignored): blocks + embedding (+ LM head when untied)."""
        embed = self.vocab_size * self.hidden_size
        return self.n_layers * self.layer_params + embed * (1 if self.tied_embeddings else 2)

    def kv_bytes_per_token(self) -> float:
        """Bytes one token adds to the KV cache across all layers: 2 (K and V) x layers x kv heads x d."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_param

    def with_dtype(self, dtype: str) -> ModelShape:
        if dtype not in BYTES_PER_PARAM:
            raise ValueError(f"unknown dtype '{dtype}'; known: {', '.join(BYTES_PER_PARAM)}")
        return replace(self, dtype=dtype)


def shape_from_config(config: Any, name: str | None = None, dtype: str | None = None) -> ModelShape:
    """A ModelShape from a Hugging Face `PretrainedConfig` (attribute maps make GPT-2's n_embd etc. work)."""
    h = config.hidden_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    intermediate = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * h
    model_type = getattr(config, "model_type", "")
    if dtype is None:
        dt = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        dtype = str(dt).removeprefix("torch.") if dt is not None else "float32"
    return ModelShape(
        name=name or getattr(config, "name_or_path", "") or model_type or "model",
        n_layers=config.num_hidden_layers,
        hidden_size=h,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=getattr(config, "head_dim", None) or h // heads,
        intermediate_size=intermediate,
        vocab_size=config.vocab_size,
        mlp_matrices=2 if model_type in PLAIN_MLP else 3,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
        dtype=dtype if dtype in BYTES_PER_PARAM else "float32",
    )


def shape_from_model(model: Any, name: str | None = None) -> ModelShape:
    """A ModelShape of a loaded model, in the dtype its weights are actually held in."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return shape_from_config(model.config, name=name, dtype=dtype)


def _shape(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    intermediate: int,
    vocab: int,
    tied: bool,
    head_dim: int | None = None,
) -> ModelShape:
    return ModelShape(
        name, layers, hidden, heads, kv, head_dim or hidden // heads, intermediate, vocab, tied_embeddings=tied
    )


# From each model's config.json on the Hugging Face hub (bfloat16 unless re-typed with .with_dtype).
SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in [
        _shape("SmolLM2-135M", 30, 576, 9, 3, 1536, 49152, True),
        _shape("SmolLM2-360M", 32, 960, 15, 5, 2560, 49152, True),
        _shape("SmolLM2-1.7B", 24, 2048, 32, 32, 8192, 49152, True),
        _shape("Qwen2.5-0.5B", 24, 896, 14, 2, 4864, 151936, True),
        _shape("Qwen2.5-1.5B", 28, 1536, 12, 2, 8960, 151936, True),
        _shape("Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, False),
        _shape("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000, False),
        _shape("Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, False),
        _shape("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000, False),
        _shape("Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, False),
        _shape("Mistral-7B", 32, 4096, 32, 8, 14336, 32000, False),
        # The models of the published GPU measurements (specviz.cost.published): Spec-Bench's
        # Vicuna v1.3 family and its SpS draft, PEARL's CodeLlama and DeepSeek-Coder.
        _shape("Vicuna-7B", 32, 4096, 32, 32, 11008, 32000, False),
        _shape("Vicuna-13B", 40, 5120, 40, 40, 13824, 32000, False),
        _shape("Vicuna-33B", 60, 6656, 52, 52, 17920, 32000, False),
        _shape("Vicuna-68M", 2, 768, 12, 12, 3072, 32000, False),
        _shape("CodeLlama-7B", 32, 4096, 32, 32, 11008, 32016, False),
        _shape("CodeLlama-34B", 48, 8192, 64, 8, 22016, 32000, False),
        _shape("CodeLlama-70B", 80, 8192, 64, 8, 28672, 32016, False),
        _shape("DeepSeek-Coder-1.3B", 24, 2048, 16, 16, 5504, 32256, False),
        _shape("DeepSeek-Coder-6.7B", 32, 4096, 32, 32, 11008, 32256, False),
        _shape("DeepSeek-Coder-33B", 62, 7168, 56, 8, 19200, 32256, False),
        # The default pair's shipped draft: SmolLM2-135M's first 4 layers' shape
        # (assets/drafts/smollm2-135m-draft-v2/config.json).
        _shape("SmolLM2-135M draft (4 layers)", 4, 576, 9, 3, 1536, 49152, False),
        # A draft of the kind DATA.md timed for SmolLM2 (4 layers x 256 wide, its 49k vocabulary).
        _shape("draft-4x256", 4, 256, 4, 2, 1024, 49152, True),
    ]
}


def get_shape(name: str) -> ModelShape:
    from specviz.errors import SpecvizError

    if name not in SHAPES:
        raise SpecvizError(f"unknown model shape '{name}'; known: {', '.join(SHAPES)}")
    return SHAPES[name]
