"""How long ``kvdiv`` commands take to start and print: ``--help``, ``models info DIR``, ``inspect STORE`` and
``show STORE``, each a fresh ``python`` process running ``kvdiv.cli.main`` (wall time, min and median over
interleaved rounds), and what each imports (``python -X importtime``: the total, and which heavy packages).

Run from the root of the checkout to measure (that copy of kvdiv is imported: ``python -c`` puts the working
directory first on ``sys.path``), after a smoke run (or pass --store and --model-dir):
    python benchmarks/cli_startup.py --rounds 3 [--results /work/before/results/smoke]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: Runs the command line of the checkout in the working directory (not the installed console script's copy).
RUNNER = "import sys; from kvdiv.cli import main; sys.exit(main(sys.argv[1:]))"

#: Packages whose import dominates start-up; the record says which of them each command imports.
HEAVY = ("torch", "transformers", "kvpress", "matplotlib", "zarr", "xarray", "numba", "polars", "snakemake", "numpy")


def commands(store: Path, model_dir: Path) -> dict[str, list[str]]:
    """The measured command lines (arguments of ``kvdiv``)."""
    return {
        "kvdiv --help": ["--help"],
        "kvdiv models info DIR": ["models", "info", str(model_dir)],
        "kvdiv inspect STORE": ["inspect", str(store)],
        "kvdiv show STORE": ["show", str(store), "--models-dir", str(model_dir.parent), "--color", "never"],
    }


def wall_time(argv: list[str]) -> float:
    """Seconds one ``kvdiv ARGV`` process takes, start to exit (it must succeed)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUNNER, *argv], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def import_profile(argv: list[str]) -> tuple[float, list[str]]:
    """Total import time (s, the sum of ``-X importtime``'s self times) and the heavy packages imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", RUNNER, *argv], check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    total_us, modules = 0, set()
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (part.strip() for part in line[len("import time:"):].split("|"))
        total_us += int(self_us)
        modules.add(name)
    return total_us / 1e6, [m for m in HEAVY if m in modules]


def main() -> None:
    """Measure and print the Markdown table of the record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=Path("results/smoke"), help="a smoke run's output root")
    parser.add_argument("--store", type=Path, help="a per-document store (default: the first under --results)")
    parser.add_argument("--model-dir", type=Path, help="the store's resolved model (default: --results/models/tiny)")
    args = parser.parse_args()
    store = args.store or sorted(args.results.glob("*/trajectories/*/*.zarr"))[0]
    model_dir = args.model_dir or args.results / "models" / "tiny"
    cases = commands(store, model_dir)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):  # interleaved: a change of load hits every command alike
        for name, argv in cases.items():
            times[name].append(wall_time(argv))
    print(f"store {store}, model {model_dir}, {args.rounds} rounds\n")
    print("| command | wall min | wall median | imports (total) | heavy packages imported |")
    print("|---|---|---|---|---|")
    for name, argv in cases.items():
        imports, heavy = import_profile(argv)
        print(f"| `{name}` | {min(times[name]):.2f} s | {statistics.median(times[name]):.2f} s | {imports:.2f} s "
              f"| {', '.join(heavy) or '-'} |")


if __name__ == "__main__":
    main()
