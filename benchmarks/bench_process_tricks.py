#!/usr/bin/env python3
"""What process-level tricks save on a realistic run: one domain's probe grid in one ``cog-pl probe protocol``.

Two tricks were measured: importing torch, Optuna and SQLAlchemy with the garbage collector paused and the heap
frozen afterwards, and leaving through ``os._exit`` (skipping the interpreter's teardown) once the command has
written everything. Each saves a fraction of a second per process; this script says how much of a whole grid that
is. It generates features with ``../shared/bench/make_features.py`` (its defaults: 100 classes, 30,000 x 512), then
runs the same grid (``--seeds`` x ``--shots``, ``--trials`` x ``--epochs``) as

- ``plain``: ``cog_pl.cli.main.main(["probe", "protocol", ...])`` in a fresh process, the command as it is;
- ``tricks``: the same, with both tricks applied around it,

taking turns ``--repeat`` times (noise on a shared machine only ever adds time, so the best of each is compared).
Both sides report, from inside, the garbage collector's time and when ``main()`` returned, so the two savings are
also measured apart from the noise of the whole: the collector's time, and the teardown (from ``main()``'s return to
the process's end, as the parent sees it). It prints every figure and the savings as shares of the plain run.

    python benchmarks/bench_process_tricks.py --repeat 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO.parent / "shared" / "bench"

#: Times the collector and says when ``main()`` returned; with ``TRICKS`` set, applies both tricks around ``main()``.
LAUNCHER = """\
import gc, logging, os, sys, time
TRICKS = {tricks}
started, spent = [0.0], [0.0]
def collecting(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - started[0]
gc.callbacks.append(collecting)
if TRICKS:
    gc.disable()
    import torch, optuna, sqlalchemy.orm, alembic.command, alembic.config, alembic.migration, alembic.script
    import cog_pl.evaluate.grid, cog_pl.probe.cell
    gc.freeze()
    gc.enable()
from cog_pl.cli.main import main
code = main(sys.argv[1:])
print(f"BENCH gc_s={{spent[0]:.4f}} returned_at={{time.time():.6f}}", file=sys.stderr, flush=True)
if TRICKS:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
"""


def timed(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall seconds of one command, which must succeed, its collector seconds and its teardown seconds."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, ended = time.perf_counter() - start, time.time()
    fields = dict(kv.split("=") for kv in proc.stderr.split("BENCH ")[-1].split())
    return {"wall_s": round(wall, 2), "gc_s": round(float(fields["gc_s"]), 3),
            "teardown_s": round(ended - float(fields["returned_at"]), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", default=["22", "37"])
    p.add_argument("--shots", nargs="+", default=["all", "1", "8"])
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--repeat", type=int, default=2, help="runs per side, taking turns; the best is compared")
    p.add_argument("--bench-dir", type=Path, default=BENCH)
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="bench_process_tricks_") as tmp:
        feats = Path(tmp) / "features"
        subprocess.run([sys.executable, str(a.bench_dir / "make_features.py"), str(feats)], check=True,
                       stdout=subprocess.DEVNULL)
        runs: dict[str, list[dict[str, float]]] = {"plain": [], "tricks": []}
        for turn in range(a.repeat):
            for side in runs:
                work = Path(tmp) / f"{side}{turn}"
                cmd = [sys.executable, "-c", LAUNCHER.format(tricks=side == "tricks"), "probe", "protocol",
                       "--features", str(feats), "--model", "bench", "--domain", "cog_l1",
                       "--results", str(work / "results.sqlite"), "--workdir", str(work), "--seeds", *a.seeds,
                       "--shots", *a.shots, "--trials", str(a.trials), "--epochs", str(a.epochs)]
                print(f"running {side} ({turn + 1}/{a.repeat}) ...", file=sys.stderr, flush=True)
                runs[side].append(timed(cmd, env))
    best = {side: {k: min(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()}
    plain = best["plain"]["wall_s"]
    print(f"grid: seeds {' '.join(a.seeds)} x shots {' '.join(a.shots)}, {a.trials} trials x {a.epochs} epochs, "
          "one process")
    for side, rs in runs.items():
        print(f"{side:<7} best wall {best[side]['wall_s']:7.2f} s, collector {best[side]['gc_s']:.3f} s, teardown "
              f"{best[side]['teardown_s']:.3f} s   runs {rs}")
    for what, key in (("whole run", "wall_s"), ("collector", "gc_s"), ("teardown", "teardown_s")):
        saved = best["plain"][key] - best["tricks"][key]
        print(f"saved by the tricks, {what}: {saved:.2f} s = {100 * saved / plain:.1f} % of the plain run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
