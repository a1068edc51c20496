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
    # closeness and sets, decided here from the reported value (math.isclose's own defaults)
    ("import math\nassert math.isclose(f(1), 0.5)", [Check("f(1)", "close", 0.5, (1e-9, 0.0, False))]),
    ("assert math.isclose(0.5, f(1), abs_tol=1e-3)", [Check("f(1)", "close", 0.5, (1e-9, 1e-3, False))]),
    ("assert abs(f(1) - 2) < 1e-6", [Check("f(1)", "close", 2, (0.0, 1e-6, True))]),
    ("assert abs(2 - f(1)) <= 0.1", [Check("f(1)", "close", 2, (0.0, 0.1, False))]),
    ("assert set(f(1)) == set([3, 1, 3])", [Check("f(1)", "set_eq", {"__set__": [1, 3]})]),
    ("assert set(f(1)) == {(1, 2)}", [Check("f(1)", "set_eq", {"__set__": [[1, 2]]})]),
    # HumanEval: check(candidate) run on the entry point; METADATA and assert True ignored
    ("METADATA = {'author': 'jt'}\n\ndef check(candidate):\n    'doc'\n    assert candidate(1) == 2\n"
     "    assert True\n    assert abs(candidate(2) - 4.0) < 1e-6\n\ncheck(f)\n",
     [Check("f(1)", "eq", 2), Check("f(2)", "close", 4.0, (0.0, 1e-6, True))]),
    # MBPP: setup imports the asserts' expressions do not use
    ("import math\nfrom typing import List\nassert f(1) == 2", [Check("f(1)", "eq", 2)]),
])
def test_parsed_asserts(source, checks):
    test = parse_assert(source)
    assert test.case.kind == "eval" and list(test.checks) == checks
    assert list(test.case.exprs) == [c.expr for c in checks]


@pytest.mark.parametrize("source", [
    "assert isinstance(f(1), int)",                   # the program could replace isinstance
    "assert set(f(1)) == set([[1, 2]])",              # not a set Python can build
    "x = 1\nx += 1\nassert f(x) == 2",               # setup other than imports and assignments
    "assert f(1) in (2, 3)",                          # a comparison other than ==, !=, is, closeness
    "assert abs(f(1) - g(2)) < 1e-6",                 # closeness to no literal
    "def check(candidate):\n    assert candidate(1) == 2\ncheck(f)\ncheck(g)",   # not HumanEval's form
    "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == x\ncheck(f)",
    "assert abs(f(1)) == True",                       # a yes/no answered by a builtin
    "assert f(1) == g(2)",                            # no literal expected value
    "assert 1 < f(1) < 3",                            # chained
    "assert f(1) == 2 +",                             # not Python
])
def test_asserts_that_stay_in_the_sandbox(source):
    test = parse_assert(source)
    assert test.case.kind == "assert" and test.case.source == source and test.checks == ()


def test_imports_and_assignments_run_first_in_the_sandbox():
    # MBPP's test_setup_code imports what its reference solutions use without importing
    test = parse_assert("import math\nfrom typing import List\nx = [1, 2]\nassert f(math.pi, x) == 3")
    assert test.case.kind == "eval" and test.case.setup == "import math\nfrom typing import List\nx = [1, 2]"
    assert list(test.checks) == [Check("f(math.pi, x)", "eq", 3)]
    assert parse_assert("assert f(1) == 2").case.setup == ""


def test_closeness_and_sets_are_decided_from_the_reported_value():
    close = [Check("f(1)", "close", 0.5, (0.0, 1e-6, True))]
    assert checks_pass(close, '[{"value": 0.5000001}]', 1e-6)
    assert not checks_pass(close, '[{"value": 0.500001}]', 1e-6)
    assert not checks_pass(close, '[{"value": true}]', 1e-6)        # a bool is not a number
    assert not checks_pass(close, '[{"value": "0.5"}]', 1e-6)
    assert not checks_pass(close, '[{"value": Infinity}]', 1e-6)
    isclose = [Check("f(1)", "close", 100, (1e-9, 0.0, False))]
    assert checks_pass(isclose, '[{"value": 100.00000000001}]', 1e-6)
    assert not checks_pass(isclose, '[{"value": 100.000001}]', 1e-6)   # rel_tol 1e-9, not the verifier's
    sets = [Check("f(1)", "set_eq", {"__set__": [1, 3]})]
    assert checks_pass(sets, '[{"value": [3, 1, 1]}]', 1e-6)
    assert checks_pass(sets, '[{"value": {"__set__": [1, 3]}}]', 1e-6)
    assert not checks_pass(sets, '[{"value": [1, 2]}]', 1e-6)
    assert not checks_pass(sets, '[{"value": 13}]', 1e-6)


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


@given(st.lists(st.sampled_from([
    "assert f(1) == 2", "assert set(f(1)) == set([[1]])", "assert set(f(1)) == {1, 2}", "import math",
    "assert math.isclose(f(1), 'a')", "assert abs(f(1) - 2) < 'x'", "x = 1", "def check(candidate):",
    "    assert candidate(1) == 2", "check(f)", "assert True", "assert f(1) == 1e999", "for i in range(2):",
    "    pass", "assert abs(f(1) - 2) < 1e-3", "assert math.isclose(f(1), 2, rel_tol=1e-3, nope=1)",
]), max_size=6))
def test_any_assert_source_parses_or_falls_back_without_raising(lines):
    test = parse_assert("\n".join(lines))
    assert test.case.kind in ("eval", "assert")
    assert (test.case.kind == "eval") == bool(test.checks)
