#!/usr/bin/env python3
"""How long the ``cog-pl`` commands that should answer at once take, as processes: the median of a few runs.

Each command runs as a fresh process of the installed ``cog-pl`` beside this Python (else ``python -c`` calling
:func:`cog_pl.cli.main.entry`), with this checkout first on ``PYTHONPATH``: ``models list``, ``--help``,
``--version``, ``run --help``, ``models download --help`` and two argument errors (an unknown option of ``run`` and a
value of the wrong type). Its exit status must be the one expected; the wall time of each run is measured from the
parent, start-up and teardown included. It prints the date, the machine (CPU model, cores, load average) and one line
per command with the median and every run; ``--json`` adds the figures as one JSON line. Noise on a shared machine
only ever adds time: compare medians taken on a quiet machine.

    python benchmarks/bench_cli_startup.py [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: (what, command line after ``cog-pl``, the exit status it must end with)
COMMANDS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("models list", ("models", "list"), 0),
    ("--help", ("--help",), 0),
    ("--version", ("--version",), 0),
    ("run --help", ("run", "--help"), 0),
    ("models download --help", ("models", "download", "--help"), 0),
    ("argument error: run --no-such-option", ("run", "--no-such-option"), 2),
    ("argument error: run --trials x", ("run", "--trials", "x"), 2),
)


def command() -> list[str]:
    """The installed ``cog-pl`` of this Python's environment, else this Python calling its entry point."""
    script = Path(sys.executable).with_name("cog-pl")
    if script.is_file():
        return [str(script)]
    found = shutil.which("cog-pl")
    return [found] if found else [sys.executable, "-c", "from cog_pl.cli.main import entry; entry()"]


def machine() -> str:
    """CPU model, cores and load average, in one line."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, load average {load}; Python {platform.python_version()}"


def timed(cmd: list[str], env: dict[str, str], expected: int) -> float:
    """Wall seconds of one process, which must end with ``expected``."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != expected:
        raise SystemExit(f"{' '.join(cmd)}: exit status {proc.returncode}, expected {expected}\n{proc.stderr}")
    return wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5, help="runs per command (the median is reported)")
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    cog_pl = command()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {machine()}")
    print(f"{' '.join(cog_pl)}, {a.repeat} runs each, wall seconds as processes")
    timed(cog_pl + ["--version"], env, 0)  # once, unmeasured: the files read from a cold cache
    figures = {}
    for what, args, expected in COMMANDS:
        runs = [timed(cog_pl + list(args), env, expected) for _ in range(a.repeat)]
        figures[what] = {"median_s": round(statistics.median(runs), 3), "runs_s": [round(r, 3) for r in runs]}
        print(f"{what:<40} median {statistics.median(runs):6.2f} s   runs "
              + " ".join(f"{r:.2f}" for r in runs), flush=True)
    if a.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
