"""Run every benchmark module, print a table and write ``bench/results.json``.

Usage: ``python -m bench [--quick] [--only SUBSTRING] [--output PATH]``; with
``BENCH_JSON_READER=off`` the event decoder's compiled tier is switched off (orjson and precise
tiers only), to measure what the compiled JSON reader gives.

Exits 1 when a ratio misses its bar or a benchmark module fails, which includes a correctness
check inside a benchmark (:class:`bench.ResultMismatchError`: the measured code computed the
wrong result).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import pkgutil
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numba
import numpy

import bench
from bench import BenchRecord
from consumers.decoding.events import EventDecoder

logger = logging.getLogger(__name__)

MODULE_PREFIX = "bench_"
JSON_READER_ENV_VAR = "BENCH_JSON_READER"
"""``off`` runs every benchmark with the event decoder's compiled tier switched off."""
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results.json"


def discover() -> list[str]:
    """Names of the benchmark modules under ``bench/``."""
    return sorted(
        f"bench.{info.name}"
        for info in pkgutil.iter_modules(bench.__path__)
        if info.name.startswith(MODULE_PREFIX)
    )


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def print_table(records: list[BenchRecord]) -> None:
    """A fixed-width table of the records."""
    header = ("benchmark", "value", "reference", "unit", "ratio", "bar", "ok")
    rows = [
        (
            r.name,
            _fmt(r.value),
            _fmt(r.reference),
            r.unit,
            "-" if r.ratio is None else f"{r.ratio:.1f}x",
            "-" if r.bar is None else f"{r.bar:g}x",
            {True: "yes", False: "NO", None: ""}[r.meets_bar],
        )
        for r in records
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))


def machine() -> dict[str, Any]:
    """Where the numbers were measured."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (noisier)")
    parser.add_argument("--only", default="", help="run modules whose name contains this")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    reader = os.environ.get(JSON_READER_ENV_VAR, "on").strip()
    EventDecoder.compiled_tier = reader != "off"
    records: list[BenchRecord] = []
    failures: list[str] = []
    for name in discover():
        if args.only not in name:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            records.extend(importlib.import_module(name).run(quick=args.quick))
        except Exception:
            failures.append(name)
            traceback.print_exc()
    print_table(records)
    payload = {
        "generated_unix": time.time(),
        "quick": args.quick,
        "machine": machine(),
        "results": [record.as_dict() for record in records],
        "failed_modules": failures,
        "json_reader_compiled_tier": EventDecoder.compiled_tier,
    }
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {args.output}", file=sys.stderr)
    missed = [r.name for r in records if r.meets_bar is False]
    if missed:
        print(f"below the bar: {', '.join(missed)}", file=sys.stderr)
    if failures:
        print(f"failed (error or wrong result): {', '.join(failures)}", file=sys.stderr)
    return 1 if failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())
