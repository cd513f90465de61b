"""How clearly ``cog-pl`` refuses bad inputs: the catalogue of tests/bad_input_cases.py, each case a process.

    python benchmarks/bad_inputs.py [--jobs 4] [--match TEXT] [--fast]

Prints one row per case (exit code, one-line error?, names the file/option?, nothing written?, seconds) and the
summary "N/M clear one-line errors". A clear error exits non-zero with no traceback, its last stderr line
``cog-pl ...: error: ...`` naming the thing, within the case's time limit, and leaves no row, store or study where
the case says (``absent``). Cases that need file permissions are
skipped as root. Runs on CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from bad_input_cases import CASES, Case, Outcome, make_data, run_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--match", default="", help="only cases whose name contains this")
    parser.add_argument("--fast", action="store_true", help="leave out the cases marked slow")
    parser.add_argument("--show", action="store_true", help="print each unclear case's last stderr lines")
    args = parser.parse_args()
    root_user = hasattr(os, "geteuid") and os.geteuid() == 0
    cases = [c for c in CASES if args.match in c.name and not (args.fast and c.slow)
             and not (c.unix_permissions and root_user)]
    with tempfile.TemporaryDirectory() as tmp:
        data = make_data(Path(tmp) / "data")
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes: list[Outcome] = list(pool.map(lambda c: run_case(c, data, REPO), cases))
        width = max(len(c.name) for c in cases)
        print(f"{'case':<{width}}  owner  exit  one-line  names  nothing-written  seconds")
        clear = 0
        for case, out in zip(cases, outcomes):
            kept = not case.written(data)
            ok = out.clear(case, data) and kept
            clear += ok
            code = "hang" if out.returncode is None else str(out.returncode)
            print(f"{case.name:<{width}}  {case.owner:^5}  {code:>4}  {_yes(out.one_line):^8}  "
                  f"{_yes(out.names(case, data)):^5}  {_yes(kept):^15}  {out.seconds:7.1f}")
            if args.show and not ok:
                _show(case, out)
    skipped = len(CASES) - len(cases)
    print(f"\n{clear}/{len(cases)} clear one-line errors" + (f" ({skipped} cases not run)" if skipped else ""))
    return 0 if clear == len(cases) else 1


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def _show(case: Case, out: Outcome) -> None:
    tail = [ln for ln in out.stderr.splitlines() if ln.strip()][-3:]
    print("      " + "\n      ".join(line[:300] for line in tail) + f"\n      (wanted: {case.names!r})")


if __name__ == "__main__":
    sys.exit(main())
