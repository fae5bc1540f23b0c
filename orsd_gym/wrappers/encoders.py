"""Text encoders: strings to fixed-size float32 vectors, for wrappers that feed text to classic RL.

* `HashedBagOfWords` (the default): weight-free hashed counts of words and word bigrams, numpy only.
* `ModelEncoder`: frozen mean-pooled last hidden states of a registered model
  (`orsd_gym.policies.models.load_policy`, e.g. the embedded SmolLM2-135M), cached per string.

Both pickle cheaply (the model encoder drops its model and cache and reloads lazily), so a wrapper
holding one can be built in, or shipped to, a `SubprocVecEnv` worker.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

_TOKEN = re.compile(r"\w+")
MODEL_PREFIX = "model:"


class TextEncoder(Protocol):
    """Maps texts to an ``[len(texts), dim]`` float32 array; equal strings give equal rows."""

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class HashedBagOfWords:
    """Signed feature hashing of lower-cased words (and word bigrams), L2-normalised.

    Each n-gram adds +1 or -1 (a second hash bit, so collisions cancel on average instead of
    piling up) at index ``crc32(ngram) % dim``. crc32 rather than Python's ``hash``: the latter is
    salted per process, and subprocess workers must encode a string the same way.
    """

    dim: int = 256
    bigrams: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"dim must be an int >= 1, got {self.dim!r}")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _TOKEN.findall(text.lower())
            grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)] if self.bigrams else words
            if not grams:
                continue
            hashes = np.fromiter((zlib.crc32(g.encode("utf-8")) for g in grams), dtype=np.uint64, count=len(grams))
            signs = np.where(hashes >> np.uint64(31) & np.uint64(1), -1.0, 1.0).astype(np.float32)
            np.add.at(out[row], (hashes % np.uint64(self.dim)).astype(np.intp), signs)
            norm = np.linalg.norm(out[row])
            if norm > 0:
                out[row] /= norm
        return out


class ModelEncoder:
    """Mean-pooled final hidden states of a frozen causal LM, one vector per distinct string.

    ``model`` is anything `load_policy` accepts (``"smollm2-135m"``, ``"tiny-random"``, a path).
    The model loads on first use (also after unpickling, so each subprocess loads its own copy
    of the model's weights). Texts longer than ``max_tokens`` keep
    their *last* tokens (the current observation ends a `HistoryObservation` text). At most
    ``cache_size`` vectors are kept (least recently used dropped first).
    """

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        max_tokens: int = 256,
        batch_size: int = 16,
        cache_size: int = 50_000,
        device: str = "cpu",
    ) -> None:
        if max_tokens < 1 or batch_size < 1 or cache_size < 0:
            raise ValueError("max_tokens and batch_size must be >= 1 and cache_size >= 0")
        self.model = model
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.device = device
        self._policy: Any = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_policy"] = None
        state["_cache"] = OrderedDict()
        return state

    def __repr__(self) -> str:
        return f"ModelEncoder({self.model!r}, max_tokens={self.max_tokens})"

    def _loaded(self) -> Any:
        if self._policy is None:
            from orsd_gym.policies.models import load_policy

            policy = load_policy(self.model, device=self.device, dtype="float32")
            policy.model.eval()
            policy.tokenizer.truncation_side = "left"
            self._policy = policy
        return self._policy

    @property
    def dim(self) -> int:
        return int(self._loaded().model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start : start + self.batch_size]
            for text, vector in zip(batch, self._embed(batch), strict=True):
                self._cache[text] = vector
        rows = []
        for text in texts:
            self._cache.move_to_end(text)
            rows.append(self._cache[text])
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)

    def _embed(self, texts: list[str]) -> np.ndarray:
        import torch

        policy = self._loaded()
        batch = policy.tokenizer(
            texts, truncation=True, max_length=self.max_tokens, padding=True, return_tensors="pt"
        ).to(policy.device)
        with torch.inference_mode():
            hidden = policy.model.get_decoder()(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return pooled.float().cpu().numpy()


def make_encoder(spec: str | TextEncoder) -> TextEncoder:
    """An encoder from a name: ``"hashed"`` (`HashedBagOfWords`) or ``"model:<name>"`` (`ModelEncoder`);
    an encoder object is returned as is."""
    if not isinstance(spec, str):
        return spec
    if spec == "hashed":
        return HashedBagOfWords()
    if spec.startswith(MODEL_PREFIX) and spec[len(MODEL_PREFIX) :]:
        return ModelEncoder(spec[len(MODEL_PREFIX) :])
    raise ValueError(
        f"unknown encoder {spec!r}: use 'hashed', 'model:<name>' (e.g. 'model:smollm2-135m') or an encoder"
    )
