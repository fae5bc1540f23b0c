"""The training config: one dataclass per section, loadable from YAML with dotted overrides.

Example: ``orsd-gym train --config configs/alfworld_cpu.yaml algo.name=orsd optim.lr=2e-5``.
An algorithm's settings have one spelling, ``algo.per_algo.<algorithm>.<key>`` (a comparison's
arm suffix ``orsd@beta=0.1`` writes there too), validated by that algorithm's own typed config
(see `orsd_gym.algos` and `orsd_gym.train.algo_settings`); an algorithm built on another (ORSD on GRPO) takes
its base's settings too. A run saves them resolved, every default included (`run_record`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orsd_gym import configio
from orsd_gym.algos.base import algorithm_config_class
from orsd_gym.plugins import import_plugins, installed_plugins
from orsd_gym.policies.base import SamplingParams
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.train.algo_settings import resolve_algo
from orsd_gym.train.validation import validate_settings


def _require_at_least_one(section: Any, *names: str) -> None:
    for name in names:
        if getattr(section, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(section, name)}")


@dataclass
class LoRAConfig:
    #: Train LoRA adapters on the attention projections instead of every weight (the base model stays frozen).
    enabled: bool = False
    #: LoRA rank: the adapters' inner width.
    r: int = 16
    #: LoRA scaling numerator: the adapters' output is scaled by alpha / r.
    alpha: int = 32
    #: Dropout on the adapters' input while updating.
    dropout: float = 0.0
    #: Module names that get adapters (a Llama-style model's attention projections by default).
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def settings(self) -> dict[str, Any] | None:
        """What `orsd_gym.policies.load_policy(lora=...)` takes (None when LoRA is off)."""
        if not self.enabled:
            return None
        return {"r": self.r, "alpha": self.alpha, "dropout": self.dropout, "target_modules": tuple(self.target_modules)}


@dataclass
class ModelConfig:
    #: A registry name (`smollm2-135m`, `tiny-random`), a local path or a hub id.
    name: str = "smollm2-135m"
    #: Where the model runs: "cpu", "cuda" or "cuda:N".
    device: str = "cpu"
    #: What the weights are held in (and compute in unless `inference_dtype` / `update_dtype` say otherwise).
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    #: LoRA adapters (`enabled: true` to train adapters only).
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    #: Model that judges attempts against rubric criteria (ORSD). None: a frozen copy of the
    #: initial policy.
    verifier: str | None = None
    #: Trainable weights (safetensors) to start from, e.g. a shared warm start.
    init_weights: str | None = None
    #: Recompute each decoder layer on backward instead of keeping its activations: updates
    #: then need a fraction of the memory for more update compute (measured: benchmarks/README.md).
    #: Sampling and scoring are unaffected.
    gradient_checkpointing: bool = True
    #: What sampling and scoring without gradients compute in (None: `dtype`). "bfloat16" runs
    #: them through autocast on a float32 model (faster decoding on CPUs with bf16 instructions).
    #: What enters a loss is never taken from it: PPO's old log-probs and the KL reference's are
    #: then scored again by the update in `update_dtype`, micro-batch by micro-batch as the loss
    #: scores them (one extra no-grad pass per iteration); ORSD's delta is always scored in the
    #: weights' dtype (float32).
    inference_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    #: What updates compute in (None: `dtype`): "bfloat16" over float32 weights is mixed
    #: precision (bf16 compute, float32 master weights and AdamW state), the GPU presets' choice.
    #: Weights held in bfloat16 or float16 cannot be fully fine-tuned (AdamW's small steps
    #: round away): a run refuses them unless LoRA trains float32 adapters.
    update_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    #: What ORSD's frozen verifier holds its weights in and computes with (None: the inference
    #: dtype). It only ranks rubrics by P("yes"), so "bfloat16" halves its memory at a small cost
    #: in score precision (benchmarks/README.md); on CPUs without bf16 instructions its questions
    #: run slower.
    verifier_dtype: Literal["float32", "bfloat16", "float16"] | None = None


@dataclass
class EnvConfig:
    #: A registered env id (`orsd-gym envs` lists them), or ``module:env-id`` to import the module that
    #: registers it.
    id: str = "orsd_gym/ALFWorld-v0"
    #: Constructor arguments for `gymnasium.make` (e.g. split, task_types, data_dir).
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Env copies played side by side (None: one per episode of an iteration, so every
    #: attempt generates in the same batch).
    num_envs: int | None = None
    #: Where the envs run: "local" (this process, or one subprocess each with `vectorization`
    #: "async") or "ray" (Ray actors of `envs_per_actor` envs each, spread over the cluster's
    #: CPUs; see `orsd_gym.rollout.ray_envs`).
    backend: Literal["local", "ray"] = "local"
    #: With backend "local": "sync" keeps the envs in this process; "async" steps each in its
    #: own subprocess.
    vectorization: Literal["sync", "async"] = "sync"
    #: With backend "ray": envs per actor, and the CPUs Ray reserves for each actor (0: actors
    #: are spread over the nodes and share their CPUs with everything else, so they always fit;
    #: reserve, e.g. 1, to place them only where CPUs are free on a cluster shared with other
    #: Ray work).
    envs_per_actor: int = 4
    #: CPUs Ray reserves for each env actor (see `envs_per_actor`).
    cpus_per_actor: float = 0.0
    #: Overrides the env's registered step budget (episodes are truncated when it is reached).
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        if self.num_envs is not None and self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")
        _require_at_least_one(self, "envs_per_actor")
        if self.cpus_per_actor < 0:
            raise ValueError(f"cpus_per_actor must be >= 0, got {self.cpus_per_actor}")


@dataclass
class RolloutConfig(RolloutOptions):
    """The rollout options (`orsd_gym.rollout.RolloutOptions`: action format, layout, budgets,
    ...) plus what each training iteration draws and how it samples."""

    #: Tasks per training iteration; each is attempted `group_size` times.
    tasks_per_iteration: int = 4
    #: Attempts per task in a training iteration: the group GRPO's advantage compares.
    group_size: int = 4
    #: Tokens the model may write per turn.
    max_new_tokens: int = 48
    #: Sampling temperature of training rollouts. Each sample records it (`Trajectory.temperature`)
    #: and every loss and replay scores its tokens at it.
    temperature: float = 1.0
    #: Nucleus sampling of training rollouts; must stay 1.0 (losses must reproduce the sampling log-probs).
    top_p: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_at_least_one(self, "tasks_per_iteration", "group_size", "max_new_tokens")
        if self.top_p != 1.0:
            # PPO ratios and ORSD's replay compare against rollout log-probs; with top-p those
            # are log-probs of a truncated distribution that scoring cannot reproduce.
            raise ValueError("top_p must be 1.0 for training (rollout log-probs must be reproducible by scoring)")
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (greedy rollouts have no usable log-probs), got {self.temperature}"
            )

    def sampling(self, temperature: float, seed: int) -> SamplingParams:
        """Sampling of one rollout phase (training rollouts use `temperature`, evaluation its own)."""
        return SamplingParams(max_new_tokens=self.max_new_tokens, temperature=temperature, top_p=self.top_p, seed=seed)


@dataclass
class AlgoConfig:
    #: The algorithm a run trains with (`orsd-gym algos` lists them).
    name: str = "grpo"
    #: Settings per algorithm name, so one file configures every algorithm of a comparison
    #: (``per_algo: {grpo: {kl_coef: 0.01}, orsd: {beta: 0.05}}``). An algorithm built on
    #: another also takes its base's settings (``grpo``'s apply to ``orsd`` runs), under its own,
    #: merged key by key (``orsd: {reward: {no_progress_penalty: 0.2}}`` keeps GRPO's other
    #: reward settings).
    per_algo: dict[str, dict[str, Any]] = field(default_factory=dict)

    #: Keys of earlier versions, and where their settings live now.
    moved_keys = {
        "params": "an algorithm's settings are spelled algo.per_algo.<algorithm>.<key> (e.g. "
        "algo.per_algo.grpo.kl_coef, which orsd runs take too; algo.per_algo.orsd.beta)"
    }


@dataclass
class OptimConfig:
    #: AdamW learning rate.
    lr: float = 1e-5
    #: AdamW weight decay.
    weight_decay: float = 0.0
    #: AdamW's first-moment decay.
    beta1: float = 0.9
    #: AdamW's second-moment decay.
    beta2: float = 0.999
    #: Clip each optimiser step's gradient to this global norm (0: no clipping).
    grad_clip: float = 1.0
    #: Optimisation passes over each rollout batch, and mini-batches (optimiser steps) per pass.
    epochs: int = 1
    #: Mini-batches (optimiser steps) per pass over a rollout batch.
    minibatches: int = 1
    #: Token budget of one forward/backward micro-batch (gradient accumulation).
    micro_batch_tokens: int = 4096
    #: Memory budget of the training process in GB (None: none). Micro-batches then also hold
    #: no more rows than the policy's activation estimate fits into what the budget leaves after
    #: the weights, gradients, AdamW state, frozen models and a runtime allowance
    #: (`orsd_gym.train.update.activation_budget`); too small a budget fails before training.
    max_memory_gb: float | None = None
    #: Learning-rate schedule over the run's optimiser steps, after `warmup_steps` of linear warm-up.
    scheduler: Literal["constant", "linear", "cosine"] = "constant"
    #: Optimiser steps of linear learning-rate warm-up from 0.
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        _require_at_least_one(self, "epochs", "minibatches", "micro_batch_tokens")
        if self.max_memory_gb is not None and self.max_memory_gb <= 0:
            raise ValueError(f"max_memory_gb must be > 0, got {self.max_memory_gb}")


@dataclass
class TrainConfig:
    #: Training iterations: rollouts, advantages and one update each.
    iterations: int = 10
    #: Seeds the model, the training-task draws and all sampling (see `orsd_gym.train.plan`).
    seed: int = 0
    #: The run directory: config, task plan, metrics, evaluations, audits and checkpoints.
    output_dir: str = "runs/default"
    #: Write a checkpoint every N iterations (and after the last).
    checkpoint_every: int = 1
    #: Checkpoints kept (the newest); older ones are removed.
    keep_checkpoints: int = 3
    #: Deterministic CPU kernels (required for bit-exact resume).
    deterministic: bool = True
    #: Torch CPU threads of this process (None: torch's default, one per core).
    threads: int | None = None
    #: Data-parallel training workers, each a full replica that plays its share of every
    #: iteration's task groups (`orsd_gym.train.workers`). More than 1: `orsd-gym train` runs
    #: them with Ray Train (see the `ray` section), or torchrun starts them.
    workers: int = 1
    #: Give each Ray worker one GPU (the model then runs there: model.device must be "cuda",
    #: and the gradients are all-reduced with NCCL instead of gloo).
    use_gpu: bool = False
    #: CPUs Ray reserves for each training worker.
    cpus_per_worker: float = 1.0
    #: Map large allocations so that freed tensor memory leaves the process at once, and hand
    #: the heap's free pages back between phases: peak resident memory then tracks what is live
    #: instead of a fragmented heap (`orsd_gym.allocator`; glibc only, process-wide).
    return_freed_memory: bool = True

    def __post_init__(self) -> None:
        if self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        if not self.output_dir.strip():
            raise ValueError("output_dir is empty: name the run's directory (e.g. runs/my_run)")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("checkpoint_every and keep_checkpoints must be >= 1")
        _require_at_least_one(self, "workers")
        if self.cpus_per_worker < 0:
            raise ValueError(f"cpus_per_worker must be >= 0, got {self.cpus_per_worker}")


@dataclass
class EvalConfig:
    #: Evaluate every N iterations (and before training and at the end); 0 disables.
    every: int = 5
    #: Distinct evaluation tasks (see `allow_repeats`).
    num_tasks: int = 8
    #: "held_out": the env's held-out tasks, disjoint from training by construction (see
    #: `orsd_gym.train.plan`); "training": evaluate on training tasks (the report says so).
    tasks: Literal["held_out", "training"] = "held_out"
    #: Let `num_tasks` exceed the distinct tasks available (tasks then repeat).
    allow_repeats: bool = False
    #: Draws the evaluation tasks and seeds their resets, independently of train.seed, so every
    #: run is evaluated on the same tasks.
    seed_base: int = 1_000_000
    #: Leave out the first N tasks of that seeded order and evaluate on the next ``num_tasks``:
    #: tasks reserved for something else (a study's teacher gate chose its setting on the first
    #: ones), so evaluation is disjoint from them by construction.
    skip_tasks: int = 0
    #: Overrides of the evaluation side's env kwargs (e.g. ``{split: valid_unseen}``); nested
    #: mappings merge key by key.
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Sampling temperature of evaluation episodes (0: greedy, one outcome per task).
    temperature: float = 0.0
    #: Episodes per evaluation task.
    group_size: int = 1
    #: A directory of recorded evaluations: one of the same weights, tasks and settings (every
    #: arm of a comparison evaluating the warm start its seeds share) is read back from there
    #: instead of played again, and a new one is recorded there (`orsd_gym.train.eval_reuse`).
    #: None: every evaluation is played. `orsd-gym compare` sets it to ``<out>/evaluations``.
    reuse_dir: str | None = None

    def __post_init__(self) -> None:
        if self.every < 0 or self.num_tasks < 0 or self.skip_tasks < 0:
            raise ValueError(
                f"every, num_tasks and skip_tasks must be >= 0, got {self.every}, {self.num_tasks}, {self.skip_tasks}"
            )
        _require_at_least_one(self, "group_size")


@dataclass
class WarmStartConfig:
    """Behaviour cloning on expert demonstrations before RL (see `orsd_gym.train.warm_start`)."""

    #: Expert episodes on training tasks (0: no warm start).
    episodes: int = 0
    #: Passes over the demonstrations.
    epochs: int = 2
    #: AdamW learning rate of the cloning.
    lr: float = 1e-4
    #: Demonstrations per cloning step.
    batch_size: int = 4
    #: Extra env arguments that make the env report its expert's plan (ALFWorld: {expert: true}).
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"expert": True})
    #: RL training draws no task the demonstrations were played on, so a run's training success
    #: is not inflated by rooms the policy was cloned in (the task plan lists both). False lets
    #: them share tasks (what runs recorded before this setting did).
    disjoint_from_training: bool = True
    #: Where the cloned weights are cached (None: ``<output_dir>/warm_start.safetensors``).
    #: Runs that share it (a comparison's algorithms with one seed) clone once and start alike.
    path: str | None = None
    #: The seed of the demonstrations: which training tasks they play, which carry a rubric,
    #: the cloning order (None: train.seed). Runs of several seeds that share one warm start
    #: (``path``) name the seed it was made with, so each run's task plan knows its
    #: demonstration tasks and RL draws none of them.
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("warm_start needs episodes >= 0, epochs >= 1, batch_size >= 1 and lr > 0")

    def demonstration_seed(self, train_seed: int) -> int:
        """The seed the demonstrations are drawn with (`seed`, else the run's ``train_seed``)."""
        return train_seed if self.seed is None else self.seed


@dataclass
class LoggingConfig:
    #: Also write metrics as TensorBoard events under the run directory.
    tensorboard: bool = True
    #: A live progress view on a terminal (one line per iteration when the output is not one).
    live: bool = True


@dataclass
class RayConfig:
    """Which Ray cluster runs training workers (``train.workers`` > 1) and env actors (``env.backend: ray``)."""

    #: None: the cluster `ray start` made on this machine if there is one, else a local Ray
    #: started on demand (and stopped at the end); "auto": the running cluster (an error if
    #: there is none); "HOST:PORT" or "ray://HOST:10001": that cluster.
    address: str | None = None


@dataclass
class Config:
    #: The policy's model, its precision and LoRA, and the verifier.
    model: ModelConfig = field(default_factory=ModelConfig)
    #: Which env, its arguments, and where its copies run.
    env: EnvConfig = field(default_factory=EnvConfig)
    #: How training episodes are played: prompts, action format, budgets, sampling.
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    #: The algorithm and its settings.
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    #: The update: optimiser, passes, micro-batches, memory budget.
    optim: OptimConfig = field(default_factory=OptimConfig)
    #: The run: iterations, seed, run directory, checkpoints, workers.
    train: TrainConfig = field(default_factory=TrainConfig)
    #: Held-out evaluation.
    eval: EvalConfig = field(default_factory=EvalConfig)
    #: Behaviour cloning on expert demonstrations before RL.
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    #: Progress view and TensorBoard.
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    #: The Ray cluster for training workers and env actors.
    ray: RayConfig = field(default_factory=RayConfig)
    #: Settings of the run's probes, measurements beside training (`orsd_gym.probes`), per
    #: probe: ``{teacher: {test: expert}, gradient_share: {every: 5}}``. `orsd-gym config
    #: explain probes` lists them; a run records every probe's settings, defaults included.
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Modules of one's own that register envs, algorithms or probes, imported when the config
    #: is made (and in every Ray worker and env actor): module names or paths to ``.py`` files,
    #: relative to the working directory (`orsd_gym.plugins`; installed packages'
    #: ``orsd_gym.plugins`` entry points are imported too).
    plugins: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.plugins:
            import_plugins(self.plugins)

    #: Settings that moved, old dotted key -> new: files, overrides and recorded runs written
    #: with the old spelling load as the new one (`orsd_gym.configio.rename_keys`).
    renamed_keys = {
        "eval.teacher_test": "probes.teacher.test",
        "eval.teacher_rubric_file": "probes.teacher.rubric_file",
        "eval.teacher_placement": "probes.teacher.placement",
        "eval.teacher_max_criteria": "probes.teacher.max_criteria",
        "eval.teacher_episodes": "probes.teacher.episodes",
        "optim.gradient_share_every": "probes.gradient_share.every",
        "warm_start.rubric_share": "probes.rubric_demonstrations.share",
        "warm_start.rubric_placement": "probes.rubric_demonstrations.placement",
        "warm_start.rubric_max_criteria": "probes.rubric_demonstrations.max_criteria",
    }


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load and fully validate a config: keys and types, the algorithm's own settings, the env
    id, env arguments and model names (`orsd_gym.train.validation`), before anything loads."""
    installed_plugins()
    config = configio.load(Config, path, overrides)
    validate_settings(config, resolve_algo(config))
    return config


def run_record(
    config: Config, probes: dict[str, dict[str, Any]] | None = None, algo_settings: Any = None
) -> dict[str, Any]:
    """What a run saves as its config.yaml: the config with ``algo.per_algo`` holding only the
    run's algorithm and ``probes`` every probe of the run (``probes``: its callbacks'
    `orsd_gym.train.callbacks.settings_record`), resolved (every default included; a run
    without probes records none, so that its probes' defaults stand in when it is compared).
    Loadable as a config again. ``algo_settings``: the run's resolved algorithm settings (None:
    resolved here)."""
    record = configio.to_dict(config)
    settings = dataclasses.asdict(resolve_algo(config) if algo_settings is None else algo_settings)
    record["algo"] = {"name": config.algo.name, "per_algo": {config.algo.name: settings}}
    record.pop("probes")
    if config.probes if probes is None else probes:
        record["probes"] = dict(config.probes if probes is None else probes)
    return record


#: Settings added after runs were recorded whose default is not what those runs did: a saved
#: run that lacks one did this (it is compared as such on resume or when a comparison reads it).
PREDATING_BEHAVIOUR = {"warm_start": {"disjoint_from_training": False}}


def default_record(algorithm: str, probes: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """`run_record` of the default config with ``algorithm`` (and ``probes``, the defaults of
    the run's probes): what a setting a saved run does not list (it predates it) is taken to be
    (its default, or `PREDATING_BEHAVIOUR`)."""
    record = configio.merge(configio.to_dict(Config(algo=AlgoConfig(name=algorithm))), PREDATING_BEHAVIOUR)
    settings = dataclasses.asdict(algorithm_config_class(algorithm)())
    record["algo"] = {"name": algorithm, "per_algo": {algorithm: settings}}
    record.pop("probes")
    if probes:
        record["probes"] = dict(probes)
    return record
