"""The one registry type: register once, look up, and one unknown-name error listing the known names."""

import pytest

from components.contracts.naming import NameRegistry, UnknownNameError


def test_register_get_and_list():
    colours = NameRegistry[int]("colour")

    @colours.register("red")
    def red() -> int:
        return 1

    colours.add("blue", lambda: 2)
    assert colours.get("red") is red and colours["red"] is red
    assert "blue" in colours and "green" not in colours
    assert list(colours) == colours.names() == ["blue", "red"] and len(colours) == 2
    with pytest.raises(ValueError, match="colour 'red' is already registered"):
        colours.add("red", red)
    colours.pop("blue")
    assert colours.names() == ["red"]


def test_unknown_names_raise_one_error_naming_kind_name_field_and_known_names():
    colours = NameRegistry[int]("colour")
    colours.add("red", 1)
    colours.add("blue", 2)
    with pytest.raises(UnknownNameError) as info:
        colours.get("green")
    assert str(info.value) == "unknown colour 'green'; known: ['blue', 'red']"
    assert isinstance(info.value, ValueError) and isinstance(info.value, KeyError)
    assert (info.value.kind, info.value.names, info.value.known) == ("colour", ["green"], ["blue", "red"])
    with pytest.raises(UnknownNameError, match=r"^paint\.colours: unknown colour \['green', 'teal'\]; known: \['blue', 'red'\]$"):
        colours.check(["red", "green", "teal"], where="paint.colours")
    colours.check(["red", "blue"])
