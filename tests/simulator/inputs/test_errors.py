"""SpecsimError: one line naming where (source: field:), what, and the fix; ``relocated``
reports the same problem where the user wrote the value."""
import pytest

from simulator.inputs.errors import SpecsimError


@pytest.mark.parametrize("kwargs, text", [
    ({}, "too big"),
    ({"source": "run.yaml"}, "run.yaml: too big"),
    ({"field": "policy.gamma"}, "policy.gamma: too big"),
    ({"source": "run.yaml", "field": "policy.gamma"}, "run.yaml: policy.gamma: too big"),
    ({"fix": "use 4"}, "too big (fix: use 4)"),
    ({"source": "run.yaml", "fix": "use 4"}, "run.yaml: too big (fix: use 4)"),
    ({"field": "policy.gamma", "fix": "use 4"}, "policy.gamma: too big (fix: use 4)"),
    ({"source": "run.yaml", "field": "policy.gamma", "fix": "use 4"},
     "run.yaml: policy.gamma: too big (fix: use 4)"),
])
def test_renders_source_field_message_and_fix(kwargs, text):
    err = SpecsimError("too big", **kwargs)
    assert str(err) == text
    assert err.args == (text,)


def test_is_a_value_error_that_keeps_its_parts():
    err = SpecsimError("too big", source="run.yaml", field="policy.gamma", fix="use 4")
    assert isinstance(err, ValueError)
    assert (err.message, err.source, err.field, err.fix) == \
        ("too big", "run.yaml", "policy.gamma", "use 4")
    with pytest.raises(ValueError, match=r"^run\.yaml: policy\.gamma: too big \(fix: use 4\)$"):
        raise err


def _original():
    return SpecsimError("must be at least 1, got 0", source="acceptance.yaml", field="alpha",
                        fix="raise it")


def test_relocated_with_nothing_given_is_the_same_report():
    moved = _original().relocated()
    assert str(moved) == "acceptance.yaml: alpha: must be at least 1, got 0 (fix: raise it)"
    assert isinstance(moved, SpecsimError)


def test_relocated_replaces_the_source_and_keeps_message_field_and_fix():
    moved = _original().relocated(source="scenario.yaml")
    assert (moved.message, moved.source, moved.field, moved.fix) == \
        ("must be at least 1, got 0", "scenario.yaml", "alpha", "raise it")
    assert str(moved) == "scenario.yaml: alpha: must be at least 1, got 0 (fix: raise it)"


def test_relocated_replaces_the_field_and_keeps_the_source():
    moved = _original().relocated(field="policy.draft2")
    assert str(moved) == ("acceptance.yaml: policy.draft2: must be at least 1, got 0 "
                          "(fix: raise it)")


def test_relocated_replaces_both():
    moved = _original().relocated(source="s.yaml", field="draft")
    assert str(moved) == "s.yaml: draft: must be at least 1, got 0 (fix: raise it)"


def test_relocated_prefix_goes_before_the_kept_field():
    moved = _original().relocated(source="s.yaml", prefix="policy.acceptance.")
    assert moved.field == "policy.acceptance.alpha"
    assert str(moved) == ("s.yaml: policy.acceptance.alpha: must be at least 1, got 0 "
                          "(fix: raise it)")


def test_relocated_prefix_goes_before_a_replaced_field():
    moved = _original().relocated(field="draft2", prefix="policy.")
    assert moved.field == "policy.draft2"


def test_relocated_prefix_alone_becomes_the_field_when_there_was_none():
    err = SpecsimError("expected a mapping", source="acceptance.yaml", fix="write key: value")
    moved = err.relocated(source="s.yaml", prefix="policy.acceptance")
    assert moved.field == "policy.acceptance"
    assert str(moved) == "s.yaml: policy.acceptance: expected a mapping (fix: write key: value)"
    # a field replaced by None, then prefixed, is the prefix too
    assert _original().relocated(field=None, prefix="policy.").field == "policy."


def test_relocated_source_none_drops_the_source():
    moved = _original().relocated(source=None, field="policy.draft2")
    assert moved.source is None
    assert str(moved) == "policy.draft2: must be at least 1, got 0 (fix: raise it)"


def test_relocated_field_none_drops_the_field():
    moved = _original().relocated(field=None)
    assert moved.field is None
    assert str(moved) == "acceptance.yaml: must be at least 1, got 0 (fix: raise it)"


def test_relocated_without_a_fix_adds_none():
    moved = SpecsimError("unknown key 'x'", field="x").relocated(source="s.yaml")
    assert moved.fix is None
    assert str(moved) == "s.yaml: x: unknown key 'x'"


def test_relocated_leaves_the_original_untouched():
    err = _original()
    moved = err.relocated(source=None, field="y", prefix="p.")
    assert moved is not err
    assert (err.source, err.field) == ("acceptance.yaml", "alpha")
    assert str(err) == "acceptance.yaml: alpha: must be at least 1, got 0 (fix: raise it)"


def test_an_unquoted_off_is_told_to_be_quoted():
    # YAML 1.1 reads `steps_table: off` as false: the message names the field and the fix
    from simulator.scenario import load_scenario
    with pytest.raises(SpecsimError) as err:
        load_scenario(None, ["engine={steps_table: off}"])
    assert err.value.field == "engine.steps_table"
    assert "quote it" in err.value.fix
    assert load_scenario(None, ["engine={steps_table: 'off'}"]).engine.steps_table == "off"
