"""WebShop's streamed JSON loading: the hand-written reader vs `ijson` (C backend), time and peak memory.

    .venv/bin/python benchmarks/perf/webshop_json_loading.py                      # 100k products, 3 repeats
    .venv/bin/python benchmarks/perf/webshop_json_loading.py --data-dir /tmp/ws100k --json out.json

A catalog of --products synthetic products in the official format (items_shuffle.json, an array;
items_ins_v2.json, an object) is written to --data-dir (reused when its files are there, else a
temporary folder). Each measurement runs in a fresh process, so its peak RSS is that reader's
alone: (a) iterating every record of both files, (b) the full `load_catalog` with that reader.
Readers alternate within each repeat (the machine is shared and noisy); the median is kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent
#: reader name -> the module holding its iter_json_array / iter_json_object
READERS = {
    "hand-written": ROOT / "_handwritten_jsonstream.py",
    "ijson": "orsd_gym.envs.webshop.jsonstream",
}
TASKS = ("iterate", "load_catalog")
BASELINE, CANDIDATE = READERS


def _reader_module(name: str) -> ModuleType:
    where = READERS[name]
    if isinstance(where, str):
        return importlib.import_module(where)
    spec = importlib.util.spec_from_file_location(f"_reader_{where.stem}", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(reader: str, task: str, data_dir: Path) -> dict[str, Any]:
    """Run in a fresh process: one task with one reader; wall and CPU seconds (CPU time moves less
    when other jobs share the cores), records, RSS before and peak."""
    from orsd_gym.envs.webshop import data
    from orsd_gym.envs.webshop.data import CATALOG_FILES, load_catalog

    module = _reader_module(reader)
    products_path, attributes_path = (data_dir / name for name in CATALOG_FILES["full"])
    start_rss = _rss_mib()
    start, start_cpu = time.perf_counter(), time.process_time()
    if task == "iterate":
        records = sum(1 for _ in module.iter_json_array(products_path))
        records += sum(1 for _ in module.iter_json_object(attributes_path))
    else:
        # data.py binds the reader's names at import; rebinding them makes load_catalog use this reader.
        data.iter_json_array, data.iter_json_object = module.iter_json_array, module.iter_json_object
        records = len(load_catalog(data_dir, size="full", seed=0))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "records": records,
        "start_rss_mib": start_rss,
        "peak_rss_mib": peak,
    }


def _child(reader: str, task: str, data_dir: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--_child", reader, task, str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(data_dir: Path, repeats: int) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {task: {reader: [] for reader in READERS} for task in TASKS}
    for _ in range(repeats):
        for task in TASKS:
            for reader in READERS:
                runs[task][reader].append(_child(reader, task, data_dir))
    results: dict[str, Any] = {"file_mib": sum(f.stat().st_size for f in data_dir.glob("*.json")) / 2**20}
    for task in TASKS:
        medians = {}
        for reader, samples in runs[task].items():
            if len({s["records"] for s in samples}) != 1:
                raise RuntimeError(f"{reader} {task}: the record count changed between repeats")
            medians[reader] = {
                key: statistics.median(s[key] for s in samples)
                for key in ("seconds", "cpu_seconds", "start_rss_mib", "peak_rss_mib")
            }
            medians[reader]["records"] = samples[0]["records"]
            medians[reader]["samples"] = samples
        if medians[BASELINE]["records"] != medians[CANDIDATE]["records"]:
            raise RuntimeError(f"{task}: the readers yield different numbers of records")
        results[task] = medians
        results[task]["ratio"] = {
            "time": medians[CANDIDATE]["seconds"] / medians[BASELINE]["seconds"],
            "cpu_time": medians[CANDIDATE]["cpu_seconds"] / medians[BASELINE]["cpu_seconds"],
            "peak_rss": medians[CANDIDATE]["peak_rss_mib"] / medians[BASELINE]["peak_rss_mib"],
            "peak_growth": (
                (medians[CANDIDATE]["peak_rss_mib"] - medians[CANDIDATE]["start_rss_mib"])
                / (medians[BASELINE]["peak_rss_mib"] - medians[BASELINE]["start_rss_mib"])
            ),
        }
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        f"WebShop JSON loading: {results['products']:,} products ({results['file_mib']:.0f} MiB of files), "
        f"median of {results['repeats']}, each in a fresh process",
        f"  {'task':<13} {'reader':<13} {'records':>8} {'wall s':>7} {'CPU s':>6} {'peak RSS MiB':>13} "
        f"{'growth MiB':>11}",
    ]
    for task in TASKS:
        for reader in READERS:
            m = results[task][reader]
            lines.append(
                f"  {task:<13} {reader:<13} {m['records']:>8} {m['seconds']:>7.2f} {m['cpu_seconds']:>6.2f} "
                f"{m['peak_rss_mib']:>13.0f} {m['peak_rss_mib'] - m['start_rss_mib']:>11.0f}"
            )
        ratio = results[task]["ratio"]
        lines.append(
            f"  {task:<13} {CANDIDATE}/{BASELINE}: wall {ratio['time']:.2f}x, CPU {ratio['cpu_time']:.2f}x, "
            f"peak RSS {ratio['peak_rss']:.2f}x, peak growth {ratio['peak_growth']:.2f}x"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=100_000, help="size of the generated catalog (if not reused)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per reader and task (the median is kept)")
    parser.add_argument("--data-dir", type=Path, default=None, help="write (or reuse) the catalog here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--_child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        reader, task, data_dir = args._child
        print(json.dumps(measure(reader, task, Path(data_dir))))
        return 0
    if args.products < 1 or args.repeats < 1:
        parser.error("--products and --repeats must be positive")

    from orsd_gym.envs.webshop.data import CATALOG_FILES
    from orsd_gym.envs.webshop.synthetic import write_synthetic_data

    with tempfile.TemporaryDirectory(prefix="webshop-json-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        if not all((data_dir / name).is_file() for name in CATALOG_FILES["full"]):
            write_synthetic_data(data_dir, args.products, seed=args.seed)
        results = run(data_dir, args.repeats)
    results.update(products=results["load_catalog"][BASELINE]["records"], repeats=args.repeats)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
