"""The wheels a GPU machine needs to run `device_check.py`, built into one directory and verified.

A GPU machine comes offline with torch, transformers, accelerate and peft (and what they
depend on) and nothing else. Into ``--out`` go this project's wheel, the wheels of what its GPU
path imports beyond that (`CARRIED`: gymnasium for the envs, rich for the trainer's console, the
WebShop env's search libraries; the synthetic catalog needs no compiled engine, and ALFWorld's
TextWorld engine is not carried), at the versions installed here (the tested ones), for every
CPython in `PYTHONS` where a wheel is compiled, SmolLM2's tokenizer saved as files (the model
shape's tokenizer, without its 94 MB GGUF) and ``requirements.txt`` naming them all. Then it
verifies: the whole set stays under `LIMIT_MIB`, every requirement of a carried wheel is carried
or comes with the GPU image, and the set installs with ``pip install --no-index``.

    python benchmarks/perf/device_wheels.py --out device-wheels            # make device-wheels
    python benchmarks/perf/device_wheels.py --out device-wheels --verify   # check a built set
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What one call to a GPU machine may carry.
LIMIT_MIB = 64
#: What the GPU image installs; their dependencies come with them.
IMAGE = ("torch", "transformers", "accelerate", "peft")
#: What the GPU path (the trainer, WebShop's synthetic catalog, paper_scale.py) imports that the
#: image lacks, with what those import in turn: pure Python (rich and its parts come with
#: transformers 5 through typer, not with an image on transformers 4) ...
CARRIED = ("gymnasium", "cloudpickle", "farama-notifications", "rich", "markdown-it-py", "mdurl", "pygments")
#: ... and compiled, carried for each CPython in `PYTHONS`.
COMPILED = ("rapidfuzz", "pystemmer", "ijson")
#: The CPython versions a GPU image may run.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
TOKENIZER = "tokenizer"
REQUIREMENTS = "requirements.txt"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def must(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        raise SystemExit(f"device-wheels: {what} failed: {done.stderr.strip().splitlines()[-1:]}")


def build(out: Path) -> None:
    """This project's wheel, the carried wheels, SmolLM2's tokenizer and requirements.txt in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    must(pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)), "pip wheel")
    fetch = ["download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", str(out)]
    pure = [f"{name}=={metadata.version(name)}" for name in CARRIED]
    must(pip(*fetch, *pure), "pip download")
    platforms = [flag for platform in PLATFORMS for flag in ("--platform", platform)]
    for python in PYTHONS:
        for name in COMPILED:
            tested = metadata.version(name)
            done = pip(*fetch, "--python-version", python, *platforms, f"{name}=={tested}")
            if done.returncode != 0:
                # The tested release may have dropped this Python: its major version's newest that has it.
                major = int(tested.split(".")[0])
                done = pip(*fetch, "--python-version", python, *platforms, f"{name}>={major},<{major + 1}")
            must(done, f"pip download {name} for Python {python}")
    from orsd_gym.policies.models import _load_smollm2_tokenizer

    _load_smollm2_tokenizer().save_pretrained(str(out / TOKENIZER))
    # Names only: the directory holds one release each (two for a compiled one a Python lacks).
    (out / REQUIREMENTS).write_text("\n".join(["orsd-gym", *CARRIED, *COMPILED]) + "\n")


def size_mib(out: Path) -> float:
    return sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20


def required(name: str) -> set[str]:
    """The distributions ``name`` requires here (no extras; markers as this interpreter reads them)."""
    needs = set()
    for line in metadata.requires(name) or []:
        requirement, _, marker = line.partition(";")
        if marker and ("extra" in marker or not _marker_holds(marker)):
            continue
        needs.add(canonical(re.split(r"[\s<>=!~\[(]", requirement.strip(), maxsplit=1)[0]))
    return needs


def _marker_holds(marker: str) -> bool:
    from packaging.markers import Marker

    return Marker(marker.strip()).evaluate()


def closure(names: tuple[str, ...]) -> set[str]:
    """``names`` and everything they require here, transitively."""
    seen: set[str] = set()
    todo = [canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(required(name) - seen)
        except metadata.PackageNotFoundError:
            continue
    return seen


def missing_requirements() -> dict[str, set[str]]:
    """Per carried distribution (and this project, less what the GPU path never imports), what
    it requires that is neither carried nor in the GPU image."""
    have = closure(IMAGE) | {canonical(n) for n in (*CARRIED, *COMPILED)}
    # matplotlib draws reports and plots, which a GPU check never makes.
    project = required("orsd-gym") - {"matplotlib"}
    gaps = {name: required(name) - have for name in (*CARRIED, *COMPILED)}
    gaps["orsd-gym"] = project - have
    return {name: gap for name, gap in gaps.items() if gap}


def verify(out: Path) -> list[str]:
    """What is wrong with the set in ``out`` (nothing: an empty list)."""
    problems = []
    if not (out / REQUIREMENTS).is_file():
        return [f"{out} holds no {REQUIREMENTS}: build it with `make device-wheels`"]
    if size_mib(out) >= LIMIT_MIB:
        problems.append(f"{out} holds {size_mib(out):.1f} MiB, over the {LIMIT_MIB} MiB a GPU call carries")
    problems += [
        f"{name} requires {sorted(gap)}, neither carried nor in the GPU image"
        for name, gap in missing_requirements().items()
    ]
    if not (out / TOKENIZER / "tokenizer_config.json").is_file():
        problems.append(f"{out / TOKENIZER} holds no saved tokenizer")
    with tempfile.TemporaryDirectory(prefix="device-wheels-") as target:
        done = install(out, Path(target))
        if done.returncode != 0:
            problems.append(f"the set does not install offline: {done.stderr.strip().splitlines()[-1:]}")
    return problems


def install(wheels: Path, target: Path) -> subprocess.CompletedProcess:
    """Install the set into ``target`` from ``wheels`` alone (no index): what a GPU machine runs."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels)]
    command += ["--no-deps", "--target", str(target), "--requirement", str(wheels / REQUIREMENTS)]
    return subprocess.run(command, capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="device-wheels", help="the directory to build into")
    parser.add_argument("--verify", action="store_true", help="only verify a set built before")
    args = parser.parse_args()
    out = Path(args.out)
    if not args.verify:
        build(out)
    problems = verify(out)
    for problem in problems:
        print(f"device-wheels: {problem}", file=sys.stderr)
    if not problems:
        wheels = len(list(out.glob("*.whl")))
        print(f"device-wheels: {wheels} wheels and SmolLM2's tokenizer in {out}, {size_mib(out):.1f} MiB; verified")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
