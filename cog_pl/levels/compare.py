"""Agreement of a level file with the official ImageNet-CoG levels.

Two views: (1) the file's levels against the official ones, concept by concept; (2) the "isolated" agreement, where
only the 5000 official concepts are ranked by the file's similarity and cut into blocks of 1000. The second isolates
the similarity measure from the unpublished manual discard list, which moves block boundaries in view (1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cog_pl.levels.ranking import cut_blocks, rank
from cog_pl.resources import LEVELS, concept_name, official_levels


@dataclass
class LevelAgreement:
    level: str
    size: int
    same: int
    moved: list[tuple[str, str, str]] = field(default_factory=list)  # (wnid, official level or "-", file level)

    @property
    def share(self) -> float:
        return self.same / self.size if self.size else 0.0


def _official_of() -> dict[str, str]:
    return {w: lvl for lvl, ws in official_levels().items() for w in ws}


def level_agreement(levels: Mapping[str, Sequence[str]]) -> list[LevelAgreement]:
    """Per level: how many of the file's concepts sit in the same official level, and where the others came from."""
    official = _official_of()
    out = []
    for lvl in LEVELS:
        mine = sorted(levels[lvl])
        moved = [(w, official.get(w, "-"), lvl) for w in mine if official.get(w) != lvl]
        out.append(LevelAgreement(lvl, len(mine), len(mine) - len(moved), moved))
    return out


def isolated_agreement(similarity: Mapping[str, float]) -> tuple[list[LevelAgreement], list[str]]:
    """Rank the official 5000 by ``similarity``, cut blocks of 1000, compare; also returns concepts lacking a value."""
    official = _official_of()
    missing = sorted(w for w in official if w not in similarity)
    ranked = rank({w: similarity[w] for w in official if w in similarity})
    return level_agreement(cut_blocks(ranked)) if not missing else [], missing


def compare_report(content: Mapping[str, Any], max_moved: int = 10) -> str:
    """A readable report of both agreements."""
    lines = ["Agreement with the official ImageNet-CoG levels", ""]
    per = level_agreement(content["levels"])
    total = sum(a.same for a in per)
    lines.append("Levels of this file vs the official levels (depends on the discard list):")
    lines += _table(per)
    size = sum(a.size for a in per)
    lines.append(f"  all   {total:5d}/{size}  {100 * total / max(1, size):6.2f}%")
    lines.append("")
    iso, missing = isolated_agreement(content.get("similarity", {}))
    lines.append("The 5000 official concepts ranked by this file's similarity, cut in blocks of 1000:")
    if missing:
        lines.append(f"  not computable: {len(missing)} official concepts have no similarity in this file "
                     f"(not eligible under its settings), e.g. {', '.join(missing[:5])}")
    else:
        lines += _table(iso)
        same = sum(a.same for a in iso)
        lines.append(f"  all   {same:5d}/5000  {100 * same / 5000:6.2f}%")
        lines += _moved(iso, max_moved)
    return "\n".join(lines)


def _table(rows: list[LevelAgreement]) -> list[str]:
    return [f"  {a.level}    {a.same:5d}/{a.size}  {100 * a.share:6.2f}%  moved: {len(a.moved)}" for a in rows]


def _moved(rows: list[LevelAgreement], limit: int) -> list[str]:
    moved = [m for a in rows for m in a.moved]
    if not moved:
        return ["  every official concept is in its official level"]
    out = [f"  moved concepts ({len(moved)}):"]
    for wnid, was, now in moved[:limit]:
        out.append(f"    {wnid} {concept_name(wnid)[:40]:40s} official {was} -> {now}")
    if len(moved) > limit:
        out.append(f"    ... {len(moved) - limit} more")
    return out


def agreement_summary(content: Mapping[str, Any]) -> dict[str, Any]:
    """Machine-readable agreement figures."""
    per = level_agreement(content["levels"])
    iso, missing = isolated_agreement(content.get("similarity", {}))
    return {
        "levels": {a.level: round(a.share, 4) for a in per},
        "levels_all": round(sum(a.same for a in per) / max(1, sum(a.size for a in per)), 4),
        "isolated": {a.level: round(a.share, 4) for a in iso},
        "isolated_all": round(sum(a.same for a in iso) / 5000, 4) if iso else None,
        "isolated_missing": missing,
    }
