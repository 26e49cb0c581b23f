"""``kvdiv finite``: exact values, Monte Carlo estimates and the suite of finite-state systems (:mod:`kvdiv.finite`).

    kvdiv finite exact FILE [--window L]
    kvdiv finite sample FILE --method naive|swrb --replicates N --seed S [--window L] [--alpha A]
    kvdiv finite suite OUTDIR [--config config/config.yaml]

``exact`` prints one JSON object with R_H, O_H, Pi_H, E_H, C_H, P_diverge (+ R_L, B_L with
``--window``); ``sample`` prints {"estimate", "stderr", "variance"} keyed like it, plus the mean
kernel-pair evaluations per replicate (and, with ``--window``, the (1 − α) enclosure of R_H).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _exact(args: argparse.Namespace) -> int:
    from kvdiv.finite.exact import enumerate_exact
    from kvdiv.finite.system import load_system

    system = load_system(args.file)
    print(json.dumps(enumerate_exact(system).summary(args.window)))
    return 0


def _sample(args: argparse.Namespace) -> int:
    from kvdiv.estimands import enclosure
    from kvdiv.finite.sampling import sample, summarize
    from kvdiv.finite.system import load_system

    system = load_system(args.file)
    result = sample(system, args.method, args.replicates, args.seed, window=args.window)
    out = summarize(result, window=args.window is not None)
    out["seed"] = args.seed
    if args.window is not None:
        out["window"] = args.window
        if args.replicates > 1:
            lo, hi = enclosure(result.column("R_L"), result.column("B_L"), args.alpha)
            out["enclosure"] = {"alpha": args.alpha, "lower": lo, "upper": hi}
    print(json.dumps(out))
    return 0


def _suite(args: argparse.Namespace) -> int:
    from kvdiv.config.sections import finite_state_section
    from kvdiv.finite.suite import build_suite
    from kvdiv.finite.system import save_system

    params = {} if args.config is None else finite_state_section(args.config)  # a typo is an error naming the file
    outdir = Path(args.outdir)
    for system in build_suite(params):
        save_system(system, outdir / f"{system.name}.json")
        print(outdir / f"{system.name}.json")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kvdiv finite {exact,sample,suite}``."""
    finite = subparsers.add_parser(
        "finite", help="finite-state kernel pairs: exact values and Monte Carlo (paper section 4)"
    )
    sub = finite.add_subparsers(dest="finite_command", required=True)

    p = sub.add_parser("exact", help="exact R_H, O_H, Pi_H, E_H, C_H, P(tau<=H) (and R_L, B_L) by enumeration")
    p.add_argument("file", help="finite-state system file (JSON, see kvdiv.finite.system)")
    p.add_argument("--window", type=_positive, default=None, metavar="L", help="divergence-aligned depth L")
    p.set_defaults(func=_exact)

    p = sub.add_parser("sample", help="naive or SWRB Monte Carlo estimates with standard errors")
    p.add_argument("file", help="finite-state system file (JSON)")
    p.add_argument("--method", choices=("naive", "swrb"), required=True)
    p.add_argument("--replicates", type=_positive, required=True, metavar="N")
    p.add_argument("--seed", type=int, required=True, metavar="S")
    p.add_argument("--window", type=_positive, default=None, metavar="L")
    p.add_argument("--alpha", type=float, default=0.05, help="level of the enclosure of R_H (with --window)")
    p.set_defaults(func=_sample)

    p = sub.add_parser("suite", help="write the suite's system files (one JSON per system) to OUTDIR")
    p.add_argument("outdir")
    p.add_argument(
        "--config", default=None, help="a config YAML whose finite_state section defines the suite (default: built-in)"
    )
    p.set_defaults(func=_suite)
