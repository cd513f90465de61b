"""``cog-pl levels build|compare|show|plot`` and ``cog-pl similarity``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from cog_pl.cli.options import at_least
from cog_pl.errors import CogError
from cog_pl.levels.measures import get_measure, list_measures
from cog_pl.protocol import LevelProtocol
from cog_pl.wordnet.similarity import LCS_RULES

_P = LevelProtocol()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("levels", help="build, compare, show and plot the concept generalization levels",
                       description="The five ImageNet-CoG levels: unseen IN-21K concepts ranked by WordNet "
                                   "similarity to the 1000 IN-1K concepts and cut into blocks of 1000.")
    lsub = p.add_subparsers(dest="levels_command", metavar="ACTION", required=True)

    b = lsub.add_parser("build", help="build a level file from WordNet 3.0 (defaults reproduce the paper)",
                        description="Rank the eligible unseen IN-21K concepts by similarity to the seen concepts "
                                    "(IN-1K, or --seen) and cut five levels; writes a versioned JSON level file (and "
                                    "with --benchmark a benchmark file for `cog-pl run`) and prints a report.")
    b.add_argument("--out", type=Path, required=True, help="level file to write (JSON)")
    b.add_argument("--seen", metavar="SET|FILE",
                   help="the concepts the model was pretrained on: " + ", ".join(_seen_names())
                        + " or a file of wnids (default in1k, the paper's); eligibility drops them and their "
                          "ancestors, similarity is the largest to any of them; or a vocabulary: MetaCLIP's "
                          "entry_counts_400m.json (entry -> count) or a lemma list, one a line, mapped to WordNet "
                          "noun synsets through their lemmas")
    b.add_argument("--seen-min-count", type=at_least(1), metavar="N",
                   help="with --seen MetaCLIP's entry counts: an entry is seen when counted at least N times "
                        "(default 1)")
    b.add_argument("--seen-senses", choices=("all", "first"),
                   help="with --seen a vocabulary: a lemma naming several synsets makes them all seen (default) or its "
                        "first WordNet sense")
    b.add_argument("--seen-report", type=Path, metavar="FILE",
                   help="with --seen a vocabulary: write its ambiguous, unmatched and outside entries here (JSON)")
    b.add_argument("--level-size", type=_level_size, metavar="N|auto",
                   help=f"concepts per level (default {_P.level_size}); 'auto': the largest size up to "
                        f"{_P.level_size} that the eligible pool fills five times")
    b.add_argument("--benchmark", type=Path, metavar="FILE",
                   help="also write a benchmark file for `cog-pl run --benchmark`, test images drawn per concept "
                        "from --in21k-root by the split rule (sha256-rank-v1)")
    b.add_argument("--test-per-concept", type=at_least(1), default=50,
                   help="with --benchmark: test images per concept (default 50, the protocol's)")
    b.add_argument("--split-seed", type=at_least(0), default=0, help="with --benchmark: seed of the test draw")
    b.add_argument("--name", help="with --benchmark: its name (default cog-seen-<seen set>)")
    b.add_argument("--discard", type=Path, help="file of wnids to drop (the paper's 70 manual discards are not public)")
    b.add_argument("--in21k-root", type=Path,
                   help="count images on your IN-21K (folder or tar per synset) instead of the Fall 2011 table")
    b.add_argument("--allow-missing", action="store_true", help="with --in21k-root: missing synsets count 0 images")
    b.add_argument("--measure", choices=list_measures(), default=_P.measure,
                   help="a WordNet measure, or 'text': cosine of sentence embeddings of names and glosses")
    b.add_argument("--concepts", choices=("eligible", "official"), default=None,
                   help="rank all eligible concepts (default) or re-rank the official 5000 into five blocks, "
                        "as the paper's App. D does for its variants (the only choice for a measure without "
                        "WordNet, such as text)")
    b.add_argument("--lcs", choices=LCS_RULES, default=_P.lcs,
                   help="lin's subsumer: 'deepest' (reproduces the official levels) or 'max-ic' (NLTK lin_similarity)")
    # eligibility options default to None: given, even at the protocol's value, they are refused where no
    # eligibility step runs
    b.add_argument("--leaf-rule", choices=("in21k", "eligible"),
                   help=f"drop ancestors of any IN-21K concept (paper appendix) or of still-eligible ones "
                        f"(default {_P.leaf_rule})")
    b.add_argument("--min-images", type=at_least(0), help=f"images a concept needs (default {_P.min_images})")
    b.add_argument("--plot", type=Path, help="also write the similarity-vs-rank PNG here")
    b.set_defaults(func=_build)

    c = lsub.add_parser("compare", help="agreement of a level file with the official levels")
    c.add_argument("file", type=Path)
    c.add_argument("--json", action="store_true", help="print the figures as JSON")
    c.add_argument("--max-moved", type=int, default=20, help="how many moved concepts to list")
    c.set_defaults(func=_compare)

    s = lsub.add_parser("show", help="counts and example concepts per level (official levels by default)")
    s.add_argument("file", type=Path, nargs="?", help="a level file; omit for the official levels")
    s.add_argument("--examples", type=int, default=5)
    s.set_defaults(func=_show)

    pl = lsub.add_parser("plot", help="PNG of similarity against rank with the level bands")
    pl.add_argument("file", type=Path)
    pl.add_argument("--out", type=Path, required=True)
    pl.set_defaults(func=_plot)

    sim = sub.add_parser("similarity", help="similarity of two synsets (one number)",
                         description="Similarity of two noun synsets (WordNet measures: with the IN-21K "
                                     "information content).")
    sim.add_argument("a", metavar="WNID")
    sim.add_argument("b", metavar="WNID")
    sim.add_argument("--measure", choices=list_measures(), default="lin")
    sim.add_argument("--lcs", choices=LCS_RULES, default=_P.lcs)
    sim.set_defaults(func=_similarity)


def _seen_names() -> list[str]:
    from cog_pl.levels.seen import NAMED

    return list(NAMED)


def _level_size(text: str) -> int | str:
    """``--level-size``: a positive integer, or ``auto``."""
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"level size {text!r}: use 'auto' or a positive integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"level size {n}: must be at least 1")
    return n


def _build(args: argparse.Namespace) -> int:
    from cog_pl.levels.builder import build_levels, write_level_file
    from cog_pl.levels.eligibility import read_discard_list
    from cog_pl.resources import in1k_wnids, in21k_wnids

    if not get_measure(args.measure).wordnet or args.concepts == "official":
        return _build_variant(args)
    if args.benchmark and not args.in21k_root:
        raise CogError("--benchmark draws each concept's test images from your IN-21K: give --in21k-root")
    seen = _build_seen(args)  # a bad --seen is refused before the ontology is built
    size = _P.level_size if args.level_size in (None, "auto") else args.level_size
    protocol = dataclasses.replace(_P, measure=args.measure, lcs=args.lcs, level_size=size,
                                   leaf_rule=args.leaf_rule or _P.leaf_rule,
                                   min_images=_P.min_images if args.min_images is None else args.min_images)
    if args.benchmark:
        from cog_pl.levels.benchmark_file import benchmark_protocol

        benchmark_protocol(protocol.min_images, args.test_per_concept)  # refused before the build
    discard = read_discard_list(args.discard, in21k_wnids()) if args.discard else []
    print(f"Building CoG levels ({protocol.measure}, lcs={protocol.lcs}, leaf rule {protocol.leaf_rule}) "
          f"relative to the seen set {seen.describe()}")
    content = build_levels(protocol, discard, args.in21k_root, args.allow_missing, seen=seen,
                           fit=args.level_size == "auto")
    bench = None
    if args.benchmark:  # drawn before anything is written: a root that lacks level concepts leaves no file
        from cog_pl.levels.benchmark_file import level_benchmark

        bench = level_benchmark(content, args.in21k_root, args.test_per_concept, args.split_seed, args.name)
    write_level_file(args.out, content)
    print("\nEligibility (count after each step):")
    for step in content["eligibility"]:
        print(f"  {step['name']:<52s} {step['remaining']:6d}  (-{step['dropped']})")
    official = set(seen.wnids) == set(in1k_wnids())
    if official:
        print(f"  eligible: {content['eligibility'][-1]['remaining']}; the paper reports {_P.eligible_in_paper} "
              f"after its {_P.manual_discards_in_paper} manual discards "
              f"({_P.eligible_in_paper + _P.manual_discards_in_paper} before them)")
    sim = content["similarity"]
    print("\nLevels (concepts; similarity to the closest seen concept: mean, range):")
    for lvl, ws in content["levels"].items():
        vals = [sim[w] for w in ws]
        print(f"  {lvl}  {len(ws):5d}  mean {sum(vals) / len(vals):.3f}  {min(vals):.3f}..{max(vals):.3f}")
    if official:
        from cog_pl.levels.compare import agreement_summary

        summary = agreement_summary(content)
        print("\nAgreement with the official levels:")
        print("  levels of this file: " + "  ".join(f"{k} {100 * v:.1f}%" for k, v in summary["levels"].items()))
        if summary["isolated_all"] is not None:
            print(f"  official 5000 ranked by this similarity: {100 * summary['isolated_all']:.2f}% in their level")
    if bench is not None:
        bench.save(args.benchmark)
        print(f"\nbenchmark {bench.name!r} ({len(bench.in1k)} seen IN-1K concepts as its in1k domain, "
              f"{args.test_per_concept} test images per level concept): {args.benchmark}")
    if args.plot:
        from cog_pl.levels.plot import plot_levels

        plot_levels(content, args.plot)
        print(f"\nplot: {args.plot}")
    print(f"\nwrote {args.out} in {content['timings']['total_s']:.1f} s")
    return 0


def _build_seen(args: argparse.Namespace):
    """``--seen`` for a build: a vocabulary's matching is printed (and with ``--seen-report`` written in full)."""
    from cog_pl.io import write_json
    from cog_pl.levels.seen import resolve_seen, vocabulary_seen_set
    from cog_pl.levels.vocabulary import vocabulary_kind

    if args.seen is not None and Path(args.seen).is_file() and vocabulary_kind(args.seen) != "wnids":
        seen, match = vocabulary_seen_set(args.seen, args.seen_min_count, args.seen_senses or "all")
        print(f"Vocabulary {args.seen}: {match.summary()}")
        for what, listed in (("ambiguous", [f"{e!r} -> {' '.join(w)}" for e, w in match.ambiguous.items()]),
                             ("unmatched", [repr(e) for e in match.unmatched]),
                             ("outside ImageNet-21K", [repr(e) for e in match.outside])):
            if listed:
                print(f"  {what} ({len(listed)}): {'; '.join(listed[:5])}{' ...' if len(listed) > 5 else ''}")
        if args.seen_report:
            write_json(args.seen_report, match.report())
            print(f"  every entry reported: {args.seen_report}")
        return seen
    given = [o for o, v in (("--seen-min-count", args.seen_min_count), ("--seen-senses", args.seen_senses),
                            ("--seen-report", args.seen_report)) if v is not None]
    if given:
        raise CogError(f"{', '.join(given)}: options of a vocabulary given as --seen (MetaCLIP's entry counts or a "
                       f"lemma list), but --seen is {args.seen or 'not given'}")
    return resolve_seen(args.seen)


def _build_variant(args: argparse.Namespace) -> int:
    from cog_pl.levels.builder import write_level_file
    from cog_pl.levels.variants import level_moves, rerank_official
    from cog_pl.resources import LEVELS

    if args.concepts == "eligible":
        raise CogError(f"--measure {args.measure} re-ranks the official 5000 concepts (it does not use WordNet); "
                       "--concepts eligible is not available")
    eligibility = {"--discard": args.discard, "--in21k-root": args.in21k_root, "--allow-missing": args.allow_missing,
                   "--leaf-rule": args.leaf_rule is not None, "--min-images": args.min_images is not None,
                   "--seen": args.seen is not None, "--seen-min-count": args.seen_min_count is not None,
                   "--seen-senses": args.seen_senses is not None, "--seen-report": args.seen_report is not None,
                   "--level-size": args.level_size is not None,
                   "--benchmark": args.benchmark is not None}
    ignored = [option for option, given in eligibility.items() if given]
    if ignored:
        raise CogError(f"{', '.join(ignored)}: eligibility options, but re-ranking the official 5000 concepts "
                       f"(--concepts official, or --measure {args.measure}) has no eligibility step")
    print(f"Re-ranking the 5000 official concepts by {args.measure} similarity to IN-1K (paper App. D)")
    content = rerank_official(args.measure, args.lcs)
    write_level_file(args.out, content)
    moves = level_moves(content)
    print("\nofficial level (rows) -> this variant's level (columns):")
    print("       " + "  ".join(f"{lvl:>5}" for lvl in LEVELS))
    for lvl, row in zip(LEVELS, moves):
        print(f"  {lvl}  " + "  ".join(f"{n:5d}" for n in row))
    print(f"  same level: {100 * np.trace(moves) / moves.sum():.1f}%")
    if args.plot:
        from cog_pl.levels.plot import plot_levels

        plot_levels(content, args.plot, title=f"{args.measure} re-ranking of the 5000 official concepts")
        print(f"plot: {args.plot}")
    print(f"wrote {args.out}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from cog_pl.levels.builder import load_level_file
    from cog_pl.levels.compare import agreement_summary, compare_report

    content = load_level_file(args.file)
    if args.json:
        print(json.dumps(agreement_summary(content), indent=1))
    else:
        print(compare_report(content, args.max_moved))
    return 0


def _show(args: argparse.Namespace) -> int:
    from cog_pl.resources import LEVELS, concept_name, official_levels

    if args.file:
        from cog_pl.levels.builder import load_level_file

        content = load_level_file(args.file)
        levels, source = content["levels"], str(args.file)
        ranking = content.get("ranking")
        sim = content.get("similarity", {})
    else:
        levels, source, ranking, sim = official_levels(), "official ImageNet-CoG levels", None, {}
    print(f"Levels of {source}")
    pos = {w: i for i, w in enumerate(ranking)} if ranking else {}
    for lvl in LEVELS:
        ws = list(levels[lvl])
        rng = ""
        if sim and all(w in sim for w in ws):
            vals = [sim[w] for w in ws]
            rng = f"  similarity {min(vals):.3f}..{max(vals):.3f}"
        if pos:
            ws.sort(key=lambda w: pos.get(w, 0))
        step = max(1, len(ws) // max(1, args.examples))
        examples = ", ".join(concept_name(w).split(",")[0] for w in ws[::step][: args.examples])
        print(f"  {lvl}  {len(ws):5d} concepts{rng}\n      e.g. {examples}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from cog_pl.levels.builder import load_level_file
    from cog_pl.levels.plot import plot_levels

    content = load_level_file(args.file)
    if "ranking" not in content or "similarity" not in content:
        raise CogError(f"{args.file} has no ranking/similarity to plot (build it with `cog-pl levels build`)")
    print(plot_levels(content, args.out))
    return 0


def _similarity(args: argparse.Namespace) -> int:
    from cog_pl.levels.measures import pair_similarity
    from cog_pl.wordnet import get_wordnet
    from cog_pl.wordnet.ontology import synset_of

    for w in (args.a, args.b):
        synset_of(get_wordnet(), w)  # names a malformed or unknown wnid before the ontology is built
    print(f"{pair_similarity(args.measure, args.a, args.b, lcs=args.lcs):.6f}")  # builds the ontology it needs
    return 0
