"""WebShop performance: env steps/s, search latency at 1k and >= 100k products, and the time and
memory of loading a large catalog by streaming.

    .venv/bin/python benchmarks/perf/webshop_perf.py                       # defaults (a few minutes)
    .venv/bin/python benchmarks/perf/webshop_perf.py --large-products 1180000   # the full set's size

The 1k figures use the official small set at ../shared/data/webshop when present (else the
synthetic catalog at 1000 products). The large catalog is generated (synthetic, official file
format) into a temporary folder, then loaded by streaming in a fresh process, so its peak
memory is measured alone; per-product figures extrapolate to the 1.18M-product full set.
Results are printed and written as JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHARED_WEBSHOP = ROOT.parent / "shared" / "data" / "webshop"
FULL_SET_PRODUCTS = 1_180_000


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _rss_mib() -> float:
    """Resident memory now (Linux /proc), what the loaded catalog keeps holding."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def search_latency(engine, queries: list[str], repeats: int = 1) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        for query in queries:
            start = time.perf_counter()
            engine.search(query)
            times.append(time.perf_counter() - start)
    ms = np.asarray(times) * 1000
    return {
        "queries": len(times),
        "mean_ms": float(ms.mean()),
        "p50_ms": float(np.median(ms)),
        "p95_ms": float(np.percentile(ms, 95)),
    }


def env_steps_per_second(env, n_steps: int, seed: int) -> dict[str, float]:
    """A random agent: searches a goal's name or clicks a random admissible button."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    steps = episodes = 0
    start = time.perf_counter()
    while steps < n_steps:
        actions = info["admissible_actions"]
        action = actions[int(rng.integers(len(actions)))] if actions else "click[back to search]"
        if action.startswith("search["):
            goal = env.unwrapped.goals[int(rng.integers(len(env.unwrapped.goals)))]
            action = f"search[{goal['name']}]"
        obs, reward, terminated, truncated, info = env.step(action)
        steps += 1
        if terminated or truncated:
            episodes += 1
            obs, info = env.reset(seed=int(rng.integers(1 << 30)))
    elapsed = time.perf_counter() - start
    return {"steps": steps, "episodes": episodes, "steps_per_s": steps / elapsed}


def measure_large_load(data_dir: str, n_queries: int) -> dict[str, Any]:
    """Run in a fresh process: stream-load the catalog, build the index, time queries."""
    from orsd_gym.envs.webshop.data import load_catalog
    from orsd_gym.envs.webshop.goals import build_goals
    from orsd_gym.envs.webshop.search import ProductSearchEngine

    base = _rss_mib()
    start = time.perf_counter()
    catalog = load_catalog(data_dir, size="full", seed=0)
    load_s = time.perf_counter() - start
    after_load = _rss_mib()
    start = time.perf_counter()
    goals = build_goals(catalog, human=False, seed=0)
    goals_s = time.perf_counter() - start
    start = time.perf_counter()
    engine = ProductSearchEngine(catalog.products)
    index_s = time.perf_counter() - start
    after_index = _rss_mib()
    queries = [g["instruction_text"] for g in goals[:n_queries]]
    real_kib = None
    if SHARED_WEBSHOP.is_dir():  # what real records cost, to extrapolate with real sizes
        before = _rss_mib()
        real = load_catalog(SHARED_WEBSHOP, size="small", seed=0)
        real_engine = ProductSearchEngine(real.products)
        real_kib = (_rss_mib() - before) * 1024 / len(real)
        del real, real_engine
    return {
        "real_kib_per_product": real_kib,
        "products": len(catalog),
        "goals": len(goals),
        "load_s": load_s,
        "goals_s": goals_s,
        "index_s": index_s,
        "rss_base_mib": base,
        "rss_catalog_mib": after_load - base,
        "rss_index_mib": after_index - after_load,
        "peak_rss_mib": _peak_rss_mib(),
        "latency": search_latency(engine, queries),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    import orsd_gym  # noqa: F401
    from orsd_gym.envs.webshop.synthetic import write_synthetic_data

    results: dict[str, Any] = {}
    data_dir = str(SHARED_WEBSHOP) if SHARED_WEBSHOP.is_dir() else None
    small_kwargs = {"data_dir": data_dir} if data_dir else {"synthetic_products": 1000}
    start = time.perf_counter()
    env = gym.make("orsd_gym/WebShop-v0", goal_split="all", **small_kwargs)
    results["small_source"] = env.unwrapped.data_source
    results["small_setup_s"] = time.perf_counter() - start
    env.unwrapped.shop_data.engine.search("warm up")
    queries = [g["instruction_text"] for g in env.unwrapped.goals[: args.queries]]
    results["small_latency"] = search_latency(env.unwrapped.shop_data.engine, queries, repeats=3)
    env_steps_per_second(env, 200, seed=args.seed)  # warm: spaCy loads on the first purchase
    results["env_text"] = env_steps_per_second(env, args.steps, seed=args.seed)
    rich = gym.make("orsd_gym/WebShop-v0", goal_split="all", observation_mode="text_rich", **small_kwargs)
    results["env_text_rich"] = env_steps_per_second(rich, args.steps, seed=args.seed)

    with tempfile.TemporaryDirectory(prefix="webshop-large-") as tmp:
        start = time.perf_counter()
        write_synthetic_data(tmp, args.large_products, seed=args.seed)
        results["large_write_s"] = time.perf_counter() - start
        results["large_file_mib"] = sum(f.stat().st_size for f in Path(tmp).iterdir()) / 2**20
        child = subprocess.run(
            [sys.executable, __file__, "--_child", tmp, "--queries", str(args.queries)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        results["large"] = json.loads(child.stdout.strip().splitlines()[-1])
    return results


def report(results: dict[str, Any]) -> str:
    large = results["large"]
    n = large["products"]
    per_product_kib = (large["rss_catalog_mib"] + large["rss_index_mib"]) * 1024 / n
    lines = [
        "WebShop performance",
        f"  1k catalog: {results['small_source']} (setup {results['small_setup_s']:.2f} s)",
        f"    search latency: mean {results['small_latency']['mean_ms']:.2f} ms, "
        f"p95 {results['small_latency']['p95_ms']:.2f} ms over {results['small_latency']['queries']} queries",
        f"    env steps/s (random agent): text {results['env_text']['steps_per_s']:.0f}, "
        f"text_rich {results['env_text_rich']['steps_per_s']:.0f} "
        f"({results['env_text']['steps']} steps, {results['env_text']['episodes']} episodes)",
        f"  large synthetic catalog: {n} products, {large['goals']} goals, files {results['large_file_mib']:.0f} MiB "
        f"(written in {results['large_write_s']:.1f} s)",
        f"    streamed load + processing {large['load_s']:.1f} s, goals {large['goals_s']:.1f} s, "
        f"index build {large['index_s']:.1f} s",
        f"    resident memory: catalog +{large['rss_catalog_mib']:.0f} MiB, index +{large['rss_index_mib']:.0f} MiB "
        f"({per_product_kib:.2f} KiB/product); process peak {large['peak_rss_mib']:.0f} MiB",
        f"    search latency: mean {large['latency']['mean_ms']:.2f} ms, p95 {large['latency']['p95_ms']:.2f} ms "
        f"over {large['latency']['queries']} queries",
        f"  extrapolated to {FULL_SET_PRODUCTS:,} products: load {large['load_s'] * FULL_SET_PRODUCTS / n:.0f} s, "
        f"index {large['index_s'] * FULL_SET_PRODUCTS / n:.0f} s, "
        f"memory {per_product_kib * FULL_SET_PRODUCTS / 2**20:.1f} GiB at the synthetic records' size",
    ]
    if large["real_kib_per_product"]:
        lines.append(
            f"    official small set: {large['real_kib_per_product']:.1f} KiB/product (catalog + index) -> "
            f"{large['real_kib_per_product'] * FULL_SET_PRODUCTS / 2**20:.1f} GiB at 1.18M real products"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large-products", type=int, default=100_000, help="size of the generated large catalog")
    parser.add_argument("--steps", type=int, default=2000, help="env steps per observation mode")
    parser.add_argument("--queries", type=int, default=200, help="search queries per catalog")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        print(json.dumps(measure_large_load(args._child, args.queries)))
        return 0
    if args.large_products < 1 or args.steps < 1 or args.queries < 1:
        parser.error("--large-products, --steps and --queries must be positive")
    results = run(args)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
