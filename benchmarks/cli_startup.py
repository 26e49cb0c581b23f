"""How long ``kvdiv`` commands take to start and print: ``--help``, ``models info DIR``, ``inspect STORE`` and
``show STORE``, each a fresh ``python`` process running ``kvdiv.cli.main`` (wall time, min and median over
interleaved rounds), and what each imports (``python -X importtime``: the total, and which heavy packages).

Each process runs in a checkout's root (``python -c`` puts the working directory first on ``sys.path``: that copy
of kvdiv is imported); ``--checkout`` names several (e.g. an older commit's ``git archive``) to compare them in the
same rounds. Run after a smoke run (or pass --store and --model-dir):
    python benchmarks/cli_startup.py --rounds 3 [--results results/smoke] [--checkout . --checkout /tmp/old]
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


def wall_time(argv: list[str], checkout: Path) -> float:
    """Seconds one ``kvdiv ARGV`` process of ``checkout`` takes, start to exit (it must succeed)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUNNER, *argv], cwd=checkout, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def import_profile(argv: list[str], checkout: Path) -> tuple[float, list[str]]:
    """Total import time (s, the sum of ``-X importtime``'s self times) and the heavy packages imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", RUNNER, *argv],
        cwd=checkout,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    total_us, modules = 0, set()
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (part.strip() for part in line[len("import time:") :].split("|"))
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
    parser.add_argument("--checkout", type=Path, action="append", help="a checkout's root (repeatable; default: .)")
    args = parser.parse_args()
    results = args.results.resolve()
    store = (args.store or sorted(results.glob("*/trajectories/*/*.zarr"))[0]).resolve()
    model_dir = (args.model_dir or results / "models" / "tiny").resolve()
    checkouts = [path.resolve() for path in args.checkout or [Path(".")]]
    cases = commands(store, model_dir)
    times: dict[tuple[str, Path], list[float]] = {(name, c): [] for name in cases for c in checkouts}
    for _ in range(args.rounds):  # interleaved: a change of load hits every command and checkout alike
        for name, argv in cases.items():
            for checkout in checkouts:
                times[name, checkout].append(wall_time(argv, checkout))
    print(f"store {store}, model {model_dir}, {args.rounds} rounds\n")
    print("| command | checkout | wall min | wall median | imports (total) | heavy packages imported |")
    print("|---|---|---|---|---|---|")
    for name, argv in cases.items():
        for checkout in checkouts:
            imports, heavy = import_profile(argv, checkout)
            wall = times[name, checkout]
            print(
                f"| `{name}` | {checkout} | {min(wall):.2f} s | {statistics.median(wall):.2f} s | {imports:.2f} s "
                f"| {', '.join(heavy) or '-'} |"
            )


if __name__ == "__main__":
    main()
