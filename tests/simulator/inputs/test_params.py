"""Param tables and parse_params: defaults filled in, aliases canonicalised, each kind and
bound enforced with the offending field named; ``given`` finds the key a user wrote."""
import math

import pytest

from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, given, parse_params

SPEC = {
    "num_speculative_tokens": Param("int", default=4, minimum=1, maximum=16, aliases=("gamma",)),
    "temperature": Param("float", default=1.0, minimum=0.0),
    "greedy": Param("bool", default=False),
    "method": Param("str", default="tree", choices=("tree", "chain")),
    "widths": Param("int_list", minimum=1, aliases=("k", "branching")),
    "acceptance": Param("any"),
}
DEFAULTS = {"num_speculative_tokens": 4, "temperature": 1.0, "greedy": False, "method": "tree",
            "widths": None, "acceptance": None}


def parse(params, **kwargs):
    return parse_params(params, SPEC, source="run.yaml", **kwargs)


def error(params, **kwargs) -> SpecsimError:
    with pytest.raises(SpecsimError) as err:
        parse(params, **kwargs)
    assert err.value.source == "run.yaml"
    return err.value


def test_param_defaults():
    p = Param("int")
    assert (p.default, p.minimum, p.maximum, p.choices, p.aliases, p.help) == \
        (None, None, None, None, (), "")


def test_nothing_given_is_every_default():
    assert parse({}) == DEFAULTS


def test_given_values_replace_their_defaults_only():
    out = parse({"temperature": 0.5, "method": "chain"})
    assert out == {**DEFAULTS, "temperature": 0.5, "method": "chain"}


def test_the_input_mapping_is_not_changed():
    raw = {"gamma": 3.0}
    out = parse(raw)
    assert raw == {"gamma": 3.0} and out is not raw


@pytest.mark.parametrize("key", ["gamma", "num_speculative_tokens"])
def test_an_alias_is_stored_under_the_canonical_name(key):
    out = parse({key: 7})
    assert out["num_speculative_tokens"] == 7
    assert "gamma" not in out and set(out) == set(SPEC)


@pytest.mark.parametrize("raw", [
    {"num_speculative_tokens": 2, "gamma": 3}, {"gamma": 3, "num_speculative_tokens": 3},
    {"k": [2], "branching": [3]}, {"widths": [2], "k": [2]},
])
def test_a_value_given_under_two_of_its_names_is_an_error_naming_both(raw):
    first, second = raw                         # the error is raised at the second key
    err = error(raw)
    assert err.message == f"given twice (as {first!r} and {second!r})"
    assert err.field == "policy." + second
    assert str(err) == f"run.yaml: policy.{second}: given twice (as {first!r} and {second!r})"


def test_an_unknown_key_is_refused_with_every_valid_name_and_alias():
    err = error({"gama": 3})
    assert err.field == "policy.gama"
    assert err.message == "unknown key 'gama'"
    assert err.fix == ("valid keys are: acceptance, branching, gamma, greedy, k, method, "
                       "num_speculative_tokens, temperature, widths")


@pytest.mark.parametrize("prefix, field", [("policy.", "policy.gamma"), ("", "gamma"),
                                           ("sweep.fields.", "sweep.fields.gamma")])
def test_the_prefix_is_put_before_the_key_the_user_wrote(prefix, field):
    assert error({"gamma": 0}, prefix=prefix).field == field


# ---------------------------------------------------------------- kinds and bounds
def test_int_accepts_whole_numbers_within_inclusive_bounds():
    for value in (1, 16, 5):
        assert parse({"gamma": value})["num_speculative_tokens"] == value
    out = parse({"gamma": 3.0})["num_speculative_tokens"]
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value, words", [
    (0, "must be at least 1, got 0"), (17, "must be at most 16, got 17"),
    (2.5, "expected a whole number, got 2.5"), (True, "expected a number, got bool True"),
    ("3", "expected a number, got str '3'"), (None, "expected a number"),
    (math.nan, "must be finite"), (math.inf, "must be finite"),
])
def test_int_refusals_name_the_field(value, words):
    err = error({"gamma": value})
    assert err.field == "policy.gamma"
    assert words in err.message


def test_float_is_returned_as_a_float():
    out = parse({"temperature": 2})["temperature"]
    assert out == 2.0 and type(out) is float
    assert parse({"temperature": 0})["temperature"] == 0.0       # the minimum is allowed


@pytest.mark.parametrize("value, words", [
    (-0.5, "must be at least 0, got -0.5"), (math.nan, "must be finite"),
    (-math.inf, "must be finite"), (False, "expected a number"), ("hot", "expected a number"),
])
def test_float_refusals_name_the_field(value, words):
    err = error({"temperature": value})
    assert err.field == "policy.temperature"
    assert words in err.message


def test_bool_takes_only_booleans():
    assert parse({"greedy": True})["greedy"] is True
    for value in (1, 0, "yes", "true", None):
        err = error({"greedy": value})
        assert err.field == "policy.greedy"
        assert err.message.startswith("expected true or false")


def test_str_takes_one_of_its_choices():
    assert parse({"method": "chain"})["method"] == "chain"
    err = error({"method": "star"})
    assert (err.field, err.message, err.fix) == \
        ("policy.method", "unknown value 'star'", "choose one of: tree, chain")
    for value in ("", 3, None):
        err = error({"method": value})
        assert err.field == "policy.method"
        assert err.message.startswith("expected a non-empty string")


def test_int_list_becomes_a_tuple_of_ints():
    out = parse({"widths": [3, 2.0, 1]})["widths"]
    assert out == (3, 2, 1) and all(type(v) is int for v in out)
    assert parse({"k": (4,)})["widths"] == (4,)


@pytest.mark.parametrize("value", [[], (), 3, "12", None, {"a": 1}])
def test_int_list_must_be_a_non_empty_list(value):
    err = error({"widths": value})
    assert err.field == "policy.widths"
    assert err.message == "expected a non-empty list of whole numbers"


@pytest.mark.parametrize("value, field, words", [
    ([2, 0], "policy.widths[1]", "must be at least 1, got 0"),
    ([1.5], "policy.widths[0]", "expected a whole number"),
    ([1, 2, "3"], "policy.widths[2]", "expected a number"),
])
def test_int_list_items_are_checked_and_named_by_index(value, field, words):
    err = error({"widths": value})
    assert err.field == field
    assert words in err.message


def test_an_int_list_item_is_named_under_the_alias_used():
    assert error({"branching": [1, -1]}).field == "policy.branching[1]"


def test_any_passes_the_value_through_unchanged():
    value = {"kind": "iid", "alpha": [0.8]}
    assert parse({"acceptance": value})["acceptance"] is value


# ---------------------------------------------------------------- given
@pytest.mark.parametrize("raw, name, key", [
    ({}, "num_speculative_tokens", None),
    ({"num_speculative_tokens": 3}, "num_speculative_tokens", "num_speculative_tokens"),
    ({"gamma": 3}, "num_speculative_tokens", "gamma"),
    ({"temperature": 0.5}, "num_speculative_tokens", None),
    ({"gamma": 0}, "num_speculative_tokens", "gamma"),          # set, though falsy
    ({"gamma": None}, "num_speculative_tokens", "gamma"),
    ({"branching": [2]}, "widths", "branching"),
    ({"k": [2]}, "widths", "k"),
    ({"greedy": True}, "greedy", "greedy"),
])
def test_given_names_the_key_the_user_wrote(raw, name, key):
    assert given(raw, SPEC, name) == key
