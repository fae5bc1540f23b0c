"""How a training run starts: in this process, as one of torchrun's processes, or as Ray Train workers.

`train` is what ``orsd-gym train`` and ``orsd-gym compare`` call:

* under torchrun (``torchrun --nproc_per_node N -m orsd_gym.cli train ...``) this process joins
  torchrun's process group (NCCL for a CUDA model, gloo otherwise) and trains as one of its
  workers; ``train.workers`` is torchrun's world size (left at 1 it is set to it);
* with ``train.workers`` > 1 it runs the workers with Ray Train's ``TorchTrainer`` on the Ray
  cluster of ``ray.address`` (by default a local Ray started on demand and stopped at the end):
  each worker is one Ray actor with ``train.cpus_per_worker`` CPUs and, with ``train.use_gpu``,
  one GPU, and Ray Train sets up their process group;
* otherwise it trains in this process.

With ``env.backend: ray`` the envs live in Ray actors of the same cluster. Errors a worker
raises on purpose (`orsd_gym.errors.OrsdGymError`: a refused run directory, a bad setting)
come back from Ray as themselves, so the command reports them in one line.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console

from orsd_gym.cluster import import_ray, ray_session
from orsd_gym.errors import ClusterResourcesError, ConfigError, OrsdGymError
from orsd_gym.plugins import import_plugins, imported_plugins
from orsd_gym.train.callbacks import TrainerCallback
from orsd_gym.train.config import Config
from orsd_gym.train.trainer import RunSummary, Trainer
from orsd_gym.train.workers import Workers


def under_torchrun() -> bool:
    """Whether torchrun (torch.distributed.elastic) started this process."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def train(
    config: Config,
    *,
    resume: bool = False,
    overwrite: bool = False,
    allow_changes: Sequence[str] = (),
    live: bool | None = None,
    console: Console | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> RunSummary:
    """Train ``config`` with as many workers as it asks for (see the module docstring) and the
    probes ``callbacks`` (each worker gets its copy); returns the summary of worker 0
    (`RunSummary.worker` says which worker's summary it is)."""
    options = {
        "resume": resume,
        "overwrite": overwrite,
        "allow_changes": tuple(allow_changes),
        "callbacks": tuple(callbacks),
    }
    if config.train.workers > 1 and not under_torchrun():
        return _train_on_ray(config, options, console or Console())
    with _env_cluster(config):
        if not under_torchrun():
            return Trainer(config, live=live, console=console, **options).run()
        config, workers = _join_torchrun(config)
        try:
            return Trainer(config, live=live, console=console, workers=workers, **options).run()
        finally:
            dist.destroy_process_group()


@contextlib.contextmanager
def _env_cluster(config: Config) -> Iterator[None]:
    """The Ray session env actors need (``env.backend: ray``), for the duration of a run."""
    if config.env.backend != "ray":
        yield
        return
    with ray_session(config.ray.address):
        yield


def _join_torchrun(config: Config) -> tuple[Config, Workers]:
    world = int(os.environ["WORLD_SIZE"])
    if config.train.workers not in (1, world):
        raise ConfigError(
            f"train.workers={config.train.workers} but torchrun started {world} processes; "
            f"pass train.workers={world} or leave it at 1"
        )
    config = copy.deepcopy(config)
    config.train.workers = world
    if config.model.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")
    return config, Workers.from_process_group()


# ---------------------------------------------------------------------------------------- Ray Train


def _train_on_ray(config: Config, options: dict[str, Any], console: Console) -> RunSummary:
    if config.model.device == "cuda" and not config.train.use_gpu:
        raise ConfigError("model.device=cuda with train.workers > 1 needs train.use_gpu=true (one GPU per Ray worker)")
    import_ray()
    from ray.train import RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchConfig, TorchTrainer

    train = config.train
    resources = {"CPU": train.cpus_per_worker, **({"GPU": 1} if train.use_gpu else {})}
    # Ray Train's own records of the fit (nothing the run needs: the run directory has it all).
    with ray_session(config.ray.address) as ray, tempfile.TemporaryDirectory(prefix="orsd-gym-ray-") as storage:
        _check_cluster(ray.cluster_resources(), config, resources)
        trainer = TorchTrainer(
            _ray_worker,
            train_loop_config=worker_payload(config, options, console.stderr),
            scaling_config=ScalingConfig(
                num_workers=train.workers, use_gpu=train.use_gpu, resources_per_worker=resources
            ),
            torch_config=TorchConfig(backend="nccl" if train.use_gpu else "gloo"),
            run_config=RunConfig(name="orsd-gym", storage_path=storage),
        )
        try:
            return trainer.fit().return_value
        except TrainingFailedError as error:
            cause = _deliberate_worker_error(error)
            if cause is None:
                raise
            raise cause from error


def worker_payload(config: Config, options: dict[str, Any], stderr: bool) -> dict[str, Any]:
    """What every Ray Train worker is handed: the config, the trainer's options, and this
    process's plugins, with the probes pickled apart so that a worker imports the plugins (where
    a probe's class may live) before it reads them."""
    rest = {key: value for key, value in options.items() if key != "callbacks"}
    callbacks = pickle.dumps(tuple(options.get("callbacks", ())))
    return {"config": config, "options": rest, "callbacks": callbacks, "plugins": imported_plugins(), "stderr": stderr}


def trainer_options(payload: dict[str, Any]) -> dict[str, Any]:
    """A worker's trainer options from `worker_payload`'s, after importing the driver's plugins."""
    import_plugins(payload["plugins"])
    return {**payload["options"], "callbacks": pickle.loads(payload["callbacks"])}


def _ray_worker(payload: dict[str, Any]) -> RunSummary:
    """One Ray Train worker: a trainer in the process group Ray Train set up (the live view is
    off: worker 0 prints one line per iteration, which Ray forwards to the driver)."""
    console = Console(stderr=payload["stderr"])
    options = trainer_options(payload)
    trainer = Trainer(payload["config"], live=False, console=console, workers=Workers.from_process_group(), **options)
    return trainer.run()


def _check_cluster(available: dict[str, float], config: Config, per_worker: dict[str, float]) -> None:
    """Fail now, not after a silent wait, when the cluster cannot hold the workers, and with
    ``env.backend: ray`` each worker's training env actors, at all."""
    workers, env = config.train.workers, config.env
    needed = {resource: workers * amount for resource, amount in per_worker.items()}
    what = f"train.workers={workers} ({', '.join(f'{a:g} {r}' for r, a in per_worker.items())} each)"
    if env.backend == "ray":
        rollout = config.rollout
        slots = env.num_envs or Workers(0, workers).most(rollout.tasks_per_iteration) * rollout.group_size
        actors = -(-slots // env.envs_per_actor)
        needed["CPU"] += workers * actors * env.cpus_per_actor
        what += f" and their {workers * actors} env actors (env.cpus_per_actor={env.cpus_per_actor:g} CPU each)"
    for resource, amount in needed.items():
        if amount > available.get(resource, 0):
            raise ClusterResourcesError(
                f"{what} need {amount:g} {resource} but the Ray cluster has {available.get(resource, 0):g}; "
                "ask for fewer (train.workers, train.cpus_per_worker, env.cpus_per_actor) or use a larger "
                "cluster (ray.address)"
            )


def _deliberate_worker_error(error: Exception) -> OrsdGymError | None:
    """The error of the lowest-ranked failed worker if it is one this package raises on purpose
    (the command then prints it in one line)."""
    failures = getattr(error, "worker_failures", None) or {}
    for rank in sorted(failures):
        if isinstance(failures[rank], OrsdGymError):
            return failures[rank]
    return None
