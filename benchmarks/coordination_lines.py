#!/usr/bin/env python3
"""Lines of the probe grid's coordination layer before issue 29 (trial leases and row claims) and now (cell claims).

The coordination layer is the code that decides who makes which cell of a grid and how a run resumes: leases,
claims, heartbeats, liveness checks, how a study is opened or started over and how its trials are asked and told
(before, told among workers that could fail each other's trials), the worker processes and what they exchange, and
the grid loops. What both versions hold alike and is no coordination is left out of both counts: the probe itself
(``Splits``, ``probe``, the trials' training in ``run_batch``), the identity digest and its refusals, and how many
workers a machine runs (``plan_workers`` and its helpers). A definition counts from its first decorator to its
last line, docstring, comments and blank lines inside it included. The whole-file count is every line of the four
files the issue counted ("about 1,100 lines": study, resume, workers, protocol_run) and of their successors
(resume's identity rules are ``cog_pl/results/identity.py``; the claims are new; protocol_run's grid and the cell
loop of issue 29, ``probe/cells.py``, are since issue 46 the one grid runner of every evaluation method,
``cog_pl/evaluate/grid.py``, counted whole), whatever else they hold.

    python benchmarks/coordination_lines.py            # before: the commit before issue 29's merge
    python benchmarks/coordination_lines.py --before bf11a15 --after HEAD
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The coordination definitions of each file before the redesign (commit bf11a15).
BEFORE = {
    "cog_pl/probe/study.py": ("worker_id", "UNSTAMPED_GRACE", "LEASE_ATTR", "WORKER_ATTR", "_read", "_start_time",
                              "_pid_namespace", "_place_of", "_place", "lease", "TrialSeededTPESampler",
                              "open_study", "joined_workers", "held_lease", "provably_dead", "_stale_reason",
                              "_others_dead", "fail_stale_trials", "still_running", "stamp", "progress",
                              "past_budget", "fail_trial", "tell_result"),
    "cog_pl/probe/resume.py": ("restart_orphaned_study", "claim_lease", "renewing", "claim_expired"),
    "cog_pl/probe/workers.py": ("cell_order", "run_workers", "_start", "work", "_Heartbeat", "_emit"),
    "cog_pl/probe/protocol_run.py": ("grid_todo", "grid_values", "run_protocol", "_cell"),
    "cog_pl/probe/tuner.py": ("_ask", "run_search"),
    "cog_pl/results.py": ("_CLAIMS", "_KEY_MATCH", "claim_row", "renew_claim", "release_claim"),
}
#: The same after it: the claims and the grid runner whole, and the rest of what the files above held.
AFTER = {
    "cog_pl/results/claims.py": "*",
    "cog_pl/evaluate/grid.py": "*",
    "cog_pl/probe/study.py": ("open_study", "trial_sampler", "ask_trials", "_FINISHED", "fail_trial", "tell_result"),
    "cog_pl/probe/workers.py": ("worker_pool", "_MAKER", "_start", "make_cell"),
    "cog_pl/probe/tuner.py": ("run_search",),
}

#: The files of the whole-file count, before and after.
FILES_BEFORE = ("cog_pl/probe/study.py", "cog_pl/probe/resume.py", "cog_pl/probe/workers.py",
                "cog_pl/probe/protocol_run.py")
FILES_AFTER = ("cog_pl/probe/study.py", "cog_pl/results/identity.py", "cog_pl/probe/workers.py",
               "cog_pl/results/claims.py", "cog_pl/evaluate/grid.py")


def source(rev: str, path: str) -> str:
    if rev == "worktree":
        return (REPO / path).read_text()
    return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def names_of(node: ast.stmt) -> tuple[str, ...]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (node.name,)
    if isinstance(node, ast.Assign):
        return tuple(t.id for t in node.targets if isinstance(t, ast.Name))
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return (node.target.id,)
    return ()


def count(rev: str, files: dict[str, tuple[str, ...] | str]) -> dict[str, int]:
    """Lines of the listed definitions, per file."""
    chosen = {}
    for path, wanted in files.items():
        text = source(rev, path)
        tree, lines = ast.parse(text), text.splitlines()
        found, total = set(), 0
        for node in tree.body:
            names = names_of(node)
            if names and (wanted == "*" or set(names) & set(wanted)):
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                while start > 1 and lines[start - 2].startswith("#:"):  # a constant's documenting comment
                    start -= 1
                total += node.end_lineno - start + 1
                found.update(names)
        missing = set() if wanted == "*" else set(wanted) - found
        if missing:
            raise SystemExit(f"{rev}:{path} has no {', '.join(sorted(missing))}; the lists above are out of date")
        chosen[path] = total
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="bf11a15", help="the revision before the redesign")
    parser.add_argument("--after", default="worktree", help="a revision, or worktree (default)")
    args = parser.parse_args()
    before, after = count(args.before, BEFORE), count(args.after, AFTER)
    width = max(map(len, [*BEFORE, *AFTER]))
    print(f"{'coordination definitions':<{width}}  before  after")
    for path in dict.fromkeys([*BEFORE, *AFTER]):
        print(f"{path:<{width}}  {before.get(path, 0):>6}  {after.get(path, 0):>5}")
    b, a = sum(before.values()), sum(after.values())
    print(f"{'total':<{width}}  {b:>6}  {a:>5}   after/before {a / b:.2f}")
    whole_b = sum(len(source(args.before, p).splitlines()) for p in FILES_BEFORE)
    whole_a = sum(len(source(args.after, p).splitlines()) for p in FILES_AFTER)
    print(f"{'whole files (the issue count)':<{width}}  {whole_b:>6}  {whole_a:>5}   "
          f"after/before {whole_a / whole_b:.2f}")


if __name__ == "__main__":
    main()
