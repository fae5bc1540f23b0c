from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).parent / "helpers"))  # shared test helpers and test envs

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only public benchmark data beside the repository (../shared/data)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public benchmark data not found at {SHARED_DATA} (only present in the team's workspace)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def alfworld_data(shared_data, tmp_path_factory) -> Path:
    """ALFWorld's official train and valid_seen games, unpacked once into a temporary
    ``$ALFWORLD_DATA``-style folder (``json_2.1.1/<split>/...``)."""
    root = tmp_path_factory.mktemp("alfworld_data")
    for split in ("train", "valid_seen"):
        archive = shared_data / "alfworld" / f"alfworld_json_2.1.1_{split}.tar.xz"
        if not archive.is_file():
            pytest.skip(f"{archive} not found")
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
    return root


@pytest.fixture(scope="module")
def policy():
    """The tiny random Llama with SmolLM2's tokenizer (fast; real tokenizer and chat template)."""
    from orsd_gym.policies.models import load_policy

    return load_policy("tiny-random")


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray (2 CPUs) for the whole test session: its start-up is slow. Its processes
    import this checkout's package and the tests' own env modules (``PYTHONPATH``), and test
    subprocesses find it through ``RAY_ADDRESS``."""
    ray = pytest.importorskip("ray")
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", "RAY_ADDRESS")}
    paths = [str(ROOT), str(Path(__file__).parent / "helpers"), saved["PYTHONPATH"] or ""]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    ray.init(address="local", num_cpus=2, logging_config=ray.LoggingConfig(log_level="ERROR"))
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    try:
        yield ray
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
