#!/usr/bin/env python3
"""Reference protocol vs ``cog-pl probe tune``, side by side on the same generated features and machine.

Generates features with ``../shared/bench/make_features.py`` (its defaults) in a temporary directory, then runs
``../shared/bench/reference_protocol.py`` and ``cog-pl probe tune`` (fast mode; ``--fp32`` adds fast mode with
float32 products, ``--journal`` fast mode with a journal-file study storage instead of the default SQLite,
``--exact`` adds exact mode) as subprocesses one after the other with the same trials, epochs and seed (ours as
the ``cog-pl`` entry point runs it: ``python -m cog_pl.cli.main probe tune``), and prints wall seconds, the ratio
(ours / reference) and the test top-1 difference (ours - reference). With ``--repeat N`` every side runs N times,
the sides taking turns, and the best wall time of each is compared (noise on a shared machine only ever adds
time); every run's time is printed too. Goal: ratio <= 0.2, difference >= -0.5.

    python benchmarks/bench_probe.py --trials 30 --epochs 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO.parent / "shared" / "bench"


def run(cmd: list[str], env: dict[str, str]) -> tuple[dict, float]:
    """Run a command, return its last stdout line as JSON and its wall seconds."""
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1]), time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--threads", type=int, default=0, help="torch threads for both sides (0: torch's default)")
    p.add_argument("--bench-dir", type=Path, default=BENCH)
    p.add_argument("--exact", action="store_true", help="also time cog-pl's exact mode")
    p.add_argument("--fp32", action="store_true", help="also time fast mode with float32 matrix products")
    p.add_argument("--journal", action="store_true", help="also time fast mode with a journal-file study storage")
    p.add_argument("--repeat", type=int, default=1, help="runs per side, taking turns; the best is compared")
    p.add_argument("--json", type=Path, help="write the figures here")
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    common = ["--trials", str(a.trials), "--epochs", str(a.epochs), "--seed", str(a.seed), "--threads", str(a.threads)]
    with tempfile.TemporaryDirectory(prefix="bench_probe_") as tmp:
        feats = Path(tmp) / "features"
        subprocess.run([sys.executable, str(a.bench_dir / "make_features.py"), str(feats)], check=True,
                       stdout=subprocess.DEVNULL)
        def sides(turn: int) -> dict[str, list[str]]:
            """The commands of one turn; ours with a fresh work directory (a new study file) each turn."""
            out = {"reference": [sys.executable, str(a.bench_dir / "reference_protocol.py"), str(feats), *common]}
            work = Path(tmp) / f"turn{turn}"
            ours = [sys.executable, "-m", "cog_pl.cli.main", "probe", "tune", "--features", str(feats), *common,
                    "--workdir", str(work)]
            out["cog-pl fast"] = [*ours, "--study-name", "fast"]
            if a.fp32:
                out["cog-pl fast fp32"] = [*ours, "--probe-precision", "32-true", "--study-name", "fast-fp32"]
            if a.journal:
                out["cog-pl journal"] = [*ours, "--storage", str(work / "optuna.log"), "--study-name", "journal"]
            if a.exact:
                out["cog-pl exact"] = [*ours, "--exact", "--study-name", "exact"]
            return out

        results: dict[str, dict] = {}
        for turn in range(a.repeat):
            for name, cmd in sides(turn).items():
                print(f"running {name} ({turn + 1}/{a.repeat}) ...", file=sys.stderr, flush=True)
                row, wall = run(cmd, env)
                walls = results.get(name, {}).get("walls_s", []) + [round(wall, 2)]
                if name not in results or wall < results[name]["wall_s"]:
                    results[name] = {"wall_s": round(wall, 2), "test_top1": round(row["test_top1"], 3),
                                     "lr": row["lr"], "wd": row["wd"], "precision": row.get("precision", "32-true"),
                                     "tune_s": row.get("tune_seconds"), "final_s": row.get("final_seconds")}
                results[name]["walls_s"] = walls
    ref = results["reference"]
    print(f"trials {a.trials}, epochs {a.epochs}, seed {a.seed}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}, best of {a.repeat} run(s) per side")
    print(f"{'side':14s} {'wall s':>8s} {'ratio':>6s} {'test top-1':>10s} {'diff':>6s}  {'precision':10s} "
          f"{'tune s':>7s} {'final s':>7s}  lr / wd")
    for name, r in results.items():
        r["ratio"] = round(r["wall_s"] / ref["wall_s"], 3)
        r["top1_diff"] = round(r["test_top1"] - ref["test_top1"], 3)
        split = (f"{r['tune_s']:7.1f} {r['final_s']:7.1f}" if r["tune_s"] is not None else f"{'':7s} {'':7s}")
        print(f"{name:14s} {r['wall_s']:8.1f} {r['ratio']:6.3f} {r['test_top1']:10.2f} {r['top1_diff']:+6.2f}"
              f"  {r['precision']:10s} {split}  {r['lr']:.3g} / {r['wd']:.2g}"
              + (f"  runs {' '.join(f'{w:.1f}' for w in r['walls_s'])}" if a.repeat > 1 else ""))
    if a.json:
        a.json.write_text(json.dumps({"trials": a.trials, "epochs": a.epochs, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
