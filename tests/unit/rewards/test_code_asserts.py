"""Assert tests parsed into expression + expected value (compared outside the sandbox), and
the runner's JSON of a program's values (plain data only)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlxf.rewards.code import Check, checks_pass, parse_assert
from rlxf.rewards.sandbox import _runner


@pytest.mark.parametrize("source, checks", [
    ("assert add(1, 2) == 3", [Check("add(1, 2)", "eq", 3)]),
    ("assert 3 == add(1, 2)", [Check("add(1, 2)", "eq", 3)]),
    ("assert f('a') != [1, (2, 3)]", [Check("f('a')", "ne", [1, [2, 3]])]),
    ("assert f() is None", [Check("f()", "is", None)]),
    ("assert not is_odd(2)", [Check("is_odd(2)", "falsy")]),
    ("assert is_odd(3)", [Check("is_odd(3)", "truthy")]),
    ("assert is_odd(3) == True", [Check("is_odd(3)", "eq", True)]),
    ("assert Solution().ok(1) is True", [Check("Solution().ok(1)", "is", True)]),
    ("assert f() == {2, 1}", [Check("f()", "eq", {"__set__": [1, 2]})]),
    ("assert f(1) == 2\nassert f(2) == 4, 'msg'", [Check("f(1)", "eq", 2), Check("f(2)", "eq", 4)]),
])
def test_parsed_asserts(source, checks):
    test = parse_assert(source)
    assert test.case.kind == "eval" and list(test.checks) == checks
    assert list(test.case.exprs) == [c.expr for c in checks]


@pytest.mark.parametrize("source", [
    "import math\nassert math.isclose(f(1), 0.5)",   # the program could replace math.isclose
    "assert isinstance(f(1), int)",                   # ... or isinstance
    "assert abs(f(1) - 2) < 1e-6",                    # a comparison other than ==, !=, is
    "assert abs(f(1)) == True",                       # a yes/no answered by a builtin
    "assert f(1) == g(2)",                            # no literal expected value
    "x = 1\nassert f(x) == 2",                        # a setup statement
    "assert 1 < f(1) < 3",                            # chained
    "assert f(1) == 2 +",                             # not Python
])
def test_asserts_that_stay_in_the_sandbox(source):
    test = parse_assert(source)
    assert test.case.kind == "assert" and test.case.source == source and test.checks == ()


def test_checks_compare_reported_values():
    checks = [Check("f(1)", "eq", 2), Check("g()", "is", True), Check("h()", "falsy")]
    assert checks_pass(checks, '[{"value": 2}, {"value": true}, {"value": []}]', 1e-6)
    assert checks_pass(checks, '[{"value": 2.0000000001}, {"value": true}, {"value": 0}]', 1e-6)
    assert not checks_pass(checks, '[{"value": 2}, {"value": 1}, {"value": []}]', 1e-6)  # 1 is not True
    assert not checks_pass(checks, '[{"value": 2}, {"error": "ZeroDivisionError"}, {"value": []}]', 1e-6)
    assert not checks_pass(checks, '[{"value": 2}, {"value": true}]', 1e-6)  # one value missing
    assert not checks_pass(checks, "true", 1e-6)
    assert not checks_pass(checks, "", 1e-6)


class _Yes(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def test_the_runner_reports_plain_data_never_the_programs_objects():
    assert _runner._to_json(_runner._plain(_Yes(5))) == "5"
    assert json.loads(_runner._to_json(_runner._plain({1: (2, {3, 1})}))) == {"1": [2, {"__set__": [1, 3]}]}
    with pytest.raises(TypeError, match="not plain data"):
        _runner._plain(object())
    assert _runner._to_json(float("nan")) == "NaN" and math.isnan(json.loads("NaN"))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(JSON)
def test_the_runners_json_is_json(value):
    assert json.loads(_runner._to_json(_runner._plain(value))) == value
