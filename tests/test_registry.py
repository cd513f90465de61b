"""The one ``Registry`` every table users extend is built on: its refusals, and the closest name it suggests."""

from __future__ import annotations

import pytest

from cog_pl.data.sources import get_source
from cog_pl.errors import UnknownNameError
from cog_pl.evaluate import get_method
from cog_pl.levels.measures import get_measure
from cog_pl.registry import Registry, did_you_mean


def test_entries_keep_their_order_and_names_are_refused_once_taken():
    table: Registry[int] = Registry("colour")
    table.add("red", 1)
    table.add("green", 2)
    assert table.names() == ("red", "green") and list(table) == ["red", "green"] and "red" in table
    with pytest.raises(ValueError, match="colour 'red' is already registered; pass replace=True"):
        table.add("red", 3)
    assert table.add("red", 3, replace=True) == 3 and table.get("red") == 3
    assert table.remove("green") == 2 and table.names() == ("red",)
    with pytest.raises(ValueError, match="needs a non-empty name"):
        table.add("", 4)


def test_an_unknown_name_suggests_the_closest_and_lists_them_all():
    table: Registry[int] = Registry("colour")
    for name in ("red", "green", "blue"):
        table.add(name, 0)
    with pytest.raises(UnknownNameError, match="^unknown colour 'gren'; did you mean 'green'\\? known: red, green, "
                                               "blue$"):
        table.get("gren")
    with pytest.raises(UnknownNameError, match="^unknown colour 'mauve'; known: red, green, blue$"):
        table.get("mauve")
    assert str(table.unknown("bleu", "or #rrggbb")).endswith("known: red, green, blue; or #rrggbb")
    assert did_you_mean("bleu", table) == "did you mean 'blue'? " and did_you_mean("x", ()) == ""


@pytest.mark.parametrize(("lookup", "typo", "suggested"), [(get_measure, "lni", "lin"),
                                                           (get_source, "hf_tar", "hf_tars"),
                                                           (get_method, "lineer", "linear")])
def test_every_table_suggests(lookup, typo, suggested):
    with pytest.raises(UnknownNameError, match=f"did you mean '{suggested}'"):
        lookup(typo)
