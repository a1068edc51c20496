r"""Run the response's Python against the sample's test cases in the sandbox.

    score = (tests passed) / (tests)        (or all-or-nothing with partial_credit=False)

The code is the last (or first) fenced ```python block of the response, or the whole
response. The ground truth holds the tests, in any of these forms::

    [{"input": "1 2\n", "output": "3\n"}, ...]                  stdin -> expected stdout
    ["assert add(1, 2) == 3", {"assert": "assert add(0, 0) == 0"}]  Python run after the program
    [{"fn_name": "add", "args": [1, 2], "expected": 3}, ...]    call a function (or Solution method)
    {"tests": [...]}                                            any of the above, wrapped
    {"inputs": [...], "outputs": [...], "fn_name": "f"}        APPS / TACO style (fn_name optional)

A JSON string holding any of these works too. A response without code scores 0 (metric
``no_code``); unusable tests are a verifier error. Each failed test is counted in one metric
that says why (``FAILURES``: a timeout, a runtime error, an exit before the answer, a wrong
answer, processes left behind, skipped by ``fail_fast``).

The sandbox only *produces* outputs; they are compared here, in a process the program cannot
reach. Assert tests are parsed into expressions and expected values -- ``assert f(x) == y``,
``y == f(x)``, ``f(x) != y``, ``f(x) is True/False/None``, ``f(x)``, ``not f(x)``,
``math.isclose(f(x), y, ...)``, ``abs(f(x) - y) < t``, ``set(f(x)) == set(y)``, with ``y`` a
literal; after imports and assignments, run first (MBPP's setup); and inside
HumanEval's ``def check(candidate): ...`` / ``check(f)`` -- so the program reports the value
of ``f(x)`` as plain data (an object whose ``__eq__`` always says yes is not data) and never
sees ``y``. An assert source that does not parse that way (other setup statements,
non-literal expected values, loops, comparisons such as ``in``) runs as written in the
sandbox's test process, while the program runs in a child of it that answers the source's
calls with plain data only (``sandbox/_runner.py``): the program cannot patch what the test
runs nor reach its result. The metric ``unparsed_asserts`` counts those tests. What such a
source passes the program that is not data (a lambda, a function, an object of a class the
test defines) stays in the test's process: the program gets a handle whose calls, iteration
and public attributes run there (an AssertionError raised there fails the test, even if the
program catches it). A name the program binds that shadows a builtin is not seen by them.
A test that is not valid Python is a verifier error naming it, not a 0 for the program.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from rlxf.rewards.answers import fractions_close
from rlxf.rewards.base import AsyncVerifier
from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase, TestOutcome
from rlxf.rewards.sandbox._runner import ASSERTION_FAILED
from rlxf.rewards.types import RewardInput, RewardResult

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Check:
    """One parsed assertion: ``expr``'s value against ``expected``, as ``how`` says."""

    expr: str
    how: str   # "eq" | "ne" | "is" (True/False/None, same type) | "truthy" | "falsy" | "close" | "set_eq"
    expected: Any = None
    tol: tuple[float, float, bool] = ()   # close: (rel_tol, abs_tol, strict): math.isclose, or |x - y| < abs_tol


@dataclass(frozen=True)
class CodeTest:
    """A test case and what passing it means."""

    case: TestCase
    expected: Any = None          # stdio: expected stdout; call: expected return value; assert: unused
    checks: tuple[Check, ...] = field(default=())  # eval (a parsed assert): one per assertion


def parse_assert(source: str) -> CodeTest:
    """An assert test as expressions the sandbox evaluates and checks compared here; an
    ``assert`` test run inside the sandbox if the source is anything else (module doc)."""
    try:
        asserts, setup = _assertions(ast.parse(source).body)
        checks = tuple(_check(node) for node in asserts)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return CodeTest(TestCase.assertion(source))
    if not checks:
        return CodeTest(TestCase.assertion(source))
    # the setup (MBPP's imports, which its solutions may rely on) runs in the program's
    # namespace before the expressions; whatever it binds, the values are compared here
    return CodeTest(TestCase.evaluate([c.expr for c in checks], "\n".join(ast.unparse(n) for n in setup)),
                    checks=checks)


def _assertions(body: list[ast.stmt]) -> tuple[list[ast.Assert], list[ast.stmt]]:
    """The assert statements a test's source amounts to, in the forms datasets write them:

    - plain asserts, after imports and assignments (MBPP's ``import math``, HumanEval's
      ``METADATA = {...}``), which are returned as the setup to run first;
    - HumanEval's ``def check(candidate): assert candidate(...) == ...`` then ``check(f)``,
      with ``candidate`` read as ``f``.

    ``assert True`` checks nothing and is dropped. Returns the asserts and the setup statements;
    anything else raises ValueError (the test then runs in the sandbox).
    """
    checker = next((n for n in body if isinstance(n, ast.FunctionDef)), None)
    if checker is not None:
        calls = [n for n in body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                 and isinstance(n.value.func, ast.Name) and n.value.func.id == checker.name]
        args = checker.args
        if (len(calls) != 1 or len(calls[0].value.args) != 1 or not isinstance(calls[0].value.args[0], ast.Name)
                or len(args.args) != 1 or args.vararg or args.kwarg or args.kwonlyargs or checker.decorator_list):
            raise ValueError("a function other than HumanEval's check(candidate)")
        rename = _Rename(args.args[0].arg, calls[0].value.args[0].id)
        inner = [n for n in checker.body if not _is_docstring(n)]
        body = [n for n in body if n is not checker and n is not calls[0]] + [rename.visit(n) for n in inner]
    asserts = [n for n in body if isinstance(n, ast.Assert)
               and not (isinstance(n.test, ast.Constant) and n.test.value is True)]
    setup = [n for n in body if not isinstance(n, ast.Assert)]
    for node in setup:
        if not (isinstance(node, (ast.Import, ast.ImportFrom))
                or (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets))):
            raise ValueError("a statement other than an assert, an import or an assignment")
    return asserts, setup


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _number(node: ast.expr) -> float | int:
    """A literal int or float (not a bool), else ValueError."""
    value = ast.literal_eval(node)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    return value


def _is_call(node: ast.expr, *names: str) -> bool:
    """``node`` is a call of one of ``names`` (``abs``, ``set``, ``math.isclose``), as written."""
    if not isinstance(node, ast.Call):
        return False
    return ast.unparse(node.func) in names


def _closeness(test: ast.expr) -> Check | None:
    """``math.isclose(E, v, rel_tol=, abs_tol=)`` and ``abs(E - v) < t`` (or ``<=``, ``v - E``): the
    value of E against v, compared here -- in the sandbox the program could replace
    ``math.isclose`` or ``abs``. None if ``test`` is neither."""
    if _is_call(test, "math.isclose", "isclose") and len(test.args) == 2:
        options = {k.arg: _number(k.value) for k in test.keywords}
        if set(options) - {"rel_tol", "abs_tol"}:
            raise ValueError("math.isclose with other options")
        tol = (float(options.get("rel_tol", 1e-9)), float(options.get("abs_tol", 0.0)), False)
        for expr, value in (test.args, test.args[::-1]):
            try:
                return _boolean(Check(ast.unparse(expr), "close", _number(value), tol), expr, computed=True)
            except (ValueError, TypeError, SyntaxError):
                continue
        raise ValueError("math.isclose without a literal side")
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))
            and _is_call(test.left, "abs") and len(test.left.args) == 1 and isinstance(test.left.args[0], ast.BinOp)
            and isinstance(test.left.args[0].op, ast.Sub)):
        bound, diff = _number(test.comparators[0]), test.left.args[0]
        tol = (0.0, float(bound), isinstance(test.ops[0], ast.Lt))
        for expr, value in ((diff.left, diff.right), (diff.right, diff.left)):
            try:
                return _boolean(Check(ast.unparse(expr), "close", _number(value), tol), expr, computed=True)
            except (ValueError, TypeError, SyntaxError):
                continue
        raise ValueError("abs(a - b) without a literal side")
    return None


def _check(node: ast.stmt) -> Check:
    if not isinstance(node, ast.Assert):
        raise ValueError("not an assert")
    test = node.test
    close = _closeness(test)
    if close is not None:
        return close
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _boolean(Check(ast.unparse(test.operand), "falsy"), test.operand)
    if isinstance(test, ast.Compare):
        if len(test.ops) != 1:
            raise ValueError("a chained comparison")
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if isinstance(op, ast.Eq) and _is_call(left, "set") and len(left.args) == 1:
            # set(f(x)) == set([...]) or == {...}: the elements compared here, not by set() there
            other = right.args[0] if _is_call(right, "set") and len(right.args) == 1 else right
            expected = ast.literal_eval(other)
            if not isinstance(expected, (list, tuple, set, frozenset)):
                raise ValueError("set() against no literal collection")
            return Check(ast.unparse(left.args[0]), "set_eq", _canonical(set(expected)))
        if isinstance(op, (ast.Eq, ast.NotEq)):
            how = "eq" if isinstance(op, ast.Eq) else "ne"
            for expr, value in ((left, right), (right, left)):
                try:
                    expected = _canonical(ast.literal_eval(value))
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
                return _boolean(Check(ast.unparse(expr), how, expected), expr)
            raise ValueError("no literal side")
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value in (True, False, None):
            return _boolean(Check(ast.unparse(left), "is", right.value), left)
        raise ValueError("an unsupported comparison")
    return _boolean(Check(ast.unparse(test), "truthy"), test)


_BUILTINS = frozenset(dir(builtins))


def _boolean(check: Check, expr: ast.expr, computed: bool = False) -> Check:
    """A check whose answer is a yes/no is only safe when the program's own function gives
    it: in ``assert isinstance(f(1), int)`` the check would run in the sandbox, where the
    program can replace ``isinstance`` (or ``abs``...) by something that always says yes.
    Those stay in the sandbox, counted as unparsed. ``computed``: the check's yes/no is
    computed here from a value the program reports (``close``)."""
    if computed or (check.how in ("eq", "ne") and not isinstance(check.expected, bool)):
        return check  # the program must produce the value itself: it never sees it
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id not in _BUILTINS:
            return check  # a function of the program's: its answer is the program's answer
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            return check  # Solution().method(...): the same
    raise ValueError("a yes/no assertion computed by code the program can replace")


def _canonical(value: Any) -> Any:
    """An expected literal in the form the sandbox reports values (sets as tagged sorted lists)."""
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted((_canonical(v) for v in value), key=repr)}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, complex):
        raise ValueError("complex numbers are not plain data")
    return value


def checks_pass(checks: Sequence[Check], result: str, float_tol: float) -> bool:
    """Whether the reported values (a JSON list, one entry per check) satisfy every check."""
    try:
        reported = json.loads(result)
    except (ValueError, RecursionError):  # not JSON, a 5,000-digit integer, 100,000 nested lists
        return False
    if not isinstance(reported, list) or len(reported) != len(checks):
        return False
    for check, item in zip(checks, reported, strict=True):
        if not isinstance(item, dict) or "value" not in item:
            return False  # the expression raised or its value was not plain data
        value = item["value"]
        if check.how == "eq" and not values_match(value, check.expected, float_tol):
            return False
        if check.how == "ne" and values_match(value, check.expected, float_tol):
            return False
        if check.how == "is" and not (type(value) is type(check.expected) and value == check.expected):
            return False
        if check.how == "truthy" and not _truthy(value):
            return False
        if check.how == "falsy" and _truthy(value):
            return False
        if check.how == "close" and not _within(value, check.expected, *check.tol):
            return False
        if check.how == "set_eq" and _elements(value) != _elements(check.expected):
            return False
    return True


def _within(value: Any, expected: int | float, rel_tol: float, abs_tol: float, strict: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        if not math.isfinite(value):
            return False
        return abs(value - expected) < abs_tol if strict else math.isclose(value, expected, rel_tol=rel_tol,
                                                                            abs_tol=abs_tol)
    except OverflowError:
        return False


def _elements(value: Any) -> set[str] | None:
    """The distinct elements of a reported list or set, as JSON keys; None for anything else."""
    if isinstance(value, dict) and set(value) == {"__set__"}:
        value = value["__set__"]
    if not isinstance(value, list):
        return None
    return {json.dumps(v, sort_keys=True) for v in value}


def _truthy(value: Any) -> bool:
    if isinstance(value, dict) and set(value) == {"__set__"}:
        return bool(value["__set__"])
    return bool(value)


def extract_code(text: str, how: str = "last_block") -> str | None:
    """The code to run: the last / first fenced block, or the whole text (``full``)."""
    if how == "full":
        return text.strip() or None
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if not blocks:
        return None
    return blocks[-1] if how == "last_block" else blocks[0]


def parse_tests(ground_truth: Any) -> list[CodeTest]:
    """The tests in a ground truth (see the module doc). Raises ValueError if there are none."""
    gt = ground_truth
    if isinstance(gt, str):
        try:
            gt = json.loads(gt)
        except json.JSONDecodeError:
            raise ValueError("the ground truth is a string but not JSON tests") from None
    if isinstance(gt, dict) and "tests" in gt:
        gt = gt["tests"]
    tests: list[CodeTest] = []
    if isinstance(gt, dict) and "inputs" in gt and "outputs" in gt:
        inputs, outputs, fn_name = gt["inputs"], gt["outputs"], gt.get("fn_name")
        if len(inputs) != len(outputs):
            raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
        for inp, out in zip(inputs, outputs, strict=True):
            if fn_name:
                args = inp if isinstance(inp, list) else [inp]
                tests.append(CodeTest(TestCase.call(fn_name, args), out))
            else:
                tests.append(CodeTest(TestCase.stdio(_text(inp)), _text(out)))
    elif isinstance(gt, list):
        for i, item in enumerate(gt):
            try:
                tests.append(_one_test(item))
            except ValueError as e:
                raise ValueError(f"test {i}: {e}") from None
    else:
        raise ValueError(f"no tests found in a ground truth of type {type(gt).__name__}")
    if not tests:
        raise ValueError("the ground truth has an empty list of tests")
    return tests


def _python(source: Any) -> str:
    """An assert test's source, if it compiles: one that does not is the test's fault, and run
    it would fail every program (a 0 that looks like the program's). ValueError says where."""
    if not isinstance(source, str):
        raise ValueError(f"an assert test must be Python source text, not {type(source).__name__}")
    try:
        compile(source, "test.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:  # ValueError: a null byte
        where = f"line {e.lineno}: " if isinstance(e, SyntaxError) and e.lineno else ""
        raise ValueError(f"the assert test {source[:80]!r} is not valid Python ({where}"
                         f"{getattr(e, 'msg', None) or str(e) or type(e).__name__}); fix the test's source") from None
    return source


def _text(value: Any) -> str:
    return "\n".join(map(str, value)) + "\n" if isinstance(value, list) else str(value)


def _one_test(item: Any) -> CodeTest:
    if isinstance(item, str):
        return parse_assert(_python(item))
    if not isinstance(item, dict):
        raise ValueError(f"a test must be a string or a dict, not {type(item).__name__}")
    if "assert" in item:
        return parse_assert(_python(item["assert"]))
    if item.get("fn_name"):
        if "expected" not in item and "output" not in item:  # None would be expected: `pass` passes
            raise ValueError(f"a call test needs its expected value (expected or output); got keys {sorted(item)}")
        args = item.get("args", item.get("input", []))
        expected = item["expected"] if "expected" in item else item["output"]
        return CodeTest(TestCase.call(item["fn_name"], args if isinstance(args, list) else [args]), expected)
    stdin = item.get("input", item.get("stdin"))
    stdout = item.get("output", item.get("stdout"))
    if stdin is None or stdout is None:
        raise ValueError(f"a test dict needs input/output, assert, or fn_name/args/expected; got keys {sorted(item)}")
    return CodeTest(TestCase.stdio(_text(stdin)), _text(stdout))


def outputs_match(actual: str, expected: str, mode: str = "tokens", float_tol: float = 1e-6) -> bool:
    """Compare a program's stdout with the expected one.

    ``tokens``: same whitespace-separated tokens, numbers as ``_numbers_close`` compares them
    (an expected integer within ``float_tol`` absolutely, other numbers also relatively; past
    float's range exactly; an expected "0042" or "+5" as text); ``lines``: same lines up to
    trailing whitespace and trailing blank lines; ``exact``: identical.
    """
    if mode == "exact":
        return actual == expected
    if mode == "lines":
        def lines(text: str) -> list[str]:
            out = [line.rstrip() for line in text.splitlines()]
            while out and not out[-1]:
                out.pop()
            return out
        return lines(actual) == lines(expected)
    a, b = actual.split(), expected.split()
    return len(a) == len(b) and all(x == y or _close(x, y, float_tol) for x, y in zip(a, b, strict=True))


_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?P<digits>\d+\.?\d*|\.\d+)(?:[eE](?P<exponent>[+-]?\d+))?")
# a decimal's exponent past which it is text: float's range with a margin (1e400 is a number,
# 1e999999 costs as much to read exactly as it has digits)
_MAX_EXPONENT = 400
_AS_TEXT = re.compile(r"\+|-?0\d")   # an expected "+5", "0042", "007.5": formatting the task asks for


def _close(x: str, y: str, tol: float) -> bool:
    """Two output tokens as numbers (actual, expected): see ``_numbers_close``. An expected
    token written with a sign or leading zeros is text (a PIN, a time, a padded binary string):
    "42" is not "0042"."""
    if _AS_TEXT.match(y):
        return False
    ny = _token_number(y)
    nx = _token_number(x, exact=isinstance(ny, int))
    return nx is not None and ny is not None and _numbers_close(nx, ny, tol)


def _token_number(token: str, exact: bool = False) -> int | float | Fraction | None:
    """The number an output token writes: an int for an integer, a float for a decimal within
    float's range (unless ``exact``), a Fraction for one past it (as floats 1.7e400 and 1.5e400
    are both inf, 1e-400 is 0, and 100000000000000000001.0 is 1e20), a float for ``inf`` and
    ``nan``; None for anything else (``1_000``, which float() reads)."""
    m = _DECIMAL.fullmatch(token)
    try:
        if m is None:
            value = float(token)
            return None if math.isfinite(value) else value
        if _INTEGER.fullmatch(token):
            return int(token)
        value = float(token)
        if not exact and math.isfinite(value) and (value != 0 or not m["digits"].strip("0.")):
            return value
        return Fraction(token) if abs(int(m["exponent"] or 0)) <= _MAX_EXPONENT else None
    except ValueError:   # not a number, or past Python's int-from-text limit of 4,300 digits
        return None


def _numbers_close(x: int | float | Fraction, y: int | float | Fraction, tol: float) -> bool:
    """The actual number ``x`` against the expected ``y``. An expected integer: an integer
    exactly, another number within ``tol`` absolutely (float noise, not a relative band:
    1000000900.0 is not 1000000000, nor is an lgamma estimate of a binomial the binomial). Any
    other expected number: within ``tol`` absolutely or relatively. Exactly
    (``answers.fractions_close``) unless both are floats: a 400-digit integer or 1e400 is not
    inf, and inf and nan equal only themselves (``print('inf')`` would pass for any of them)."""
    if any(isinstance(v, float) and not math.isfinite(v) for v in (x, y)):
        return x == y
    if isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=tol, abs_tol=tol)
    tolerance = Fraction(str(tol))
    return fractions_close(Fraction(y), Fraction(x), tolerance, tolerance,
                           integers=(isinstance(y, int), isinstance(x, int)))


def values_match(actual: Any, expected: Any, tol: float = 1e-6) -> bool:
    """JSON values equal (actual, expected): numbers as ``_numbers_close`` compares them,
    tuples as lists."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        return _numbers_close(actual, expected, tol)
    if isinstance(actual, list) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(values_match(a, e, tol) for a, e in zip(actual, expected, strict=True))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == {str(k) for k in expected} and all(
            values_match(actual[str(k)], v, tol) for k, v in expected.items())
    return actual == expected


# why a test failed: each failed test is counted in exactly one of these metrics
FAILURES = ("timeouts", "runtime_errors", "exited_early", "wrong_answers", "stray_processes", "skipped")


def failure(test: CodeTest, outcome: TestOutcome) -> str:
    """The metric a failed test counts in, so a 0 always says why. ``exited_early``: the program
    ended with status 0 (``sys.exit(0)``, ``os._exit(0)``) before it reported a call's, an eval's
    or an assert's answer; an expression that raised is a runtime error, as a raising call is;
    an unparsed assert test whose own assertion failed is a wrong answer (an AssertionError the
    program raised is its runtime error)."""
    status = outcome.status
    if status in ("timeout", "wall_timeout"):
        return "timeouts"
    if status in ("stray_processes", "skipped"):
        return status
    if test.case.kind == "assert" and outcome.result == ASSERTION_FAILED:
        return "wrong_answers"
    if status != "ok" or (test.case.kind == "stdio" and outcome.stdout_truncated):
        return "runtime_errors"   # error, memory, killed, output_limit
    if test.case.kind != "stdio" and not outcome.result:
        return "exited_early"
    if test.case.kind == "eval" and _raised(outcome.result):
        return "runtime_errors"
    return "wrong_answers"


def _raised(result: str) -> bool:
    try:
        reported = json.loads(result)
    except (ValueError, RecursionError):
        return False
    return isinstance(reported, list) and any(isinstance(i, dict) and "value" not in i for i in reported)


class CodeVerifier(AsyncVerifier):
    """Fraction of test cases the response's program passes, run in a ``Sandbox``.

    ``self_limited``: the sandbox bounds each job's time from when it starts running, not from
    when it was queued, so the scorer puts no ``reward.timeout_s`` around it -- that timeout
    would count time spent waiting behind other programs and fail correct ones for it.
    """

    self_limited = True

    def __init__(self, name: str, sandbox: Sandbox, *, extract: str = "last_block", compare: str = "tokens",
                 float_tol: float = 1e-6, partial_credit: bool = True, fail_fast: bool = False):
        super().__init__(name, concurrency=sandbox.concurrency)
        self.sandbox = sandbox
        self.extract = extract
        self.compare = compare
        self.float_tol = float_tol
        self.partial_credit = partial_credit
        self.fail_fast = fail_fast

    @classmethod
    def from_config(cls, cfg: Any) -> CodeVerifier:
        limits = SandboxLimits(cpu_s=cfg.cpu_s, cpu_margin=cfg.cpu_margin, wall_s=cfg.wall_s, memory_mb=cfg.memory_mb,
                               max_processes=cfg.max_processes, max_open_files=cfg.max_open_files,
                               max_file_mb=cfg.max_file_mb, tmp_mb=cfg.tmp_mb)
        sandbox = Sandbox(limits, concurrency=cfg.concurrency, isolation=cfg.isolation,
                          sandbox_uid=cfg.sandbox_uid)
        return cls(cfg.label, sandbox, extract=cfg.extract, compare=cfg.compare, float_tol=cfg.float_tol,
                   partial_credit=cfg.partial_credit, fail_fast=cfg.fail_fast)

    def passed(self, test: CodeTest, outcome: TestOutcome, token: str) -> bool:
        if outcome.status != "ok":
            return False
        kind = test.case.kind
        if kind == "stdio":
            return not outcome.stdout_truncated and outputs_match(outcome.stdout, test.expected, self.compare,
                                                                  self.float_tol)
        if kind == "eval":
            return checks_pass(test.checks, outcome.result, self.float_tol)
        if kind == "assert":
            return outcome.result == token
        try:
            value = json.loads(outcome.result)
        except (ValueError, RecursionError):  # what the program reported is the program's doing
            return False
        if values_match(value, test.expected, self.float_tol):
            return True
        # APPS wraps a call's expected value in a one-element list
        wrapped = test.expected
        return isinstance(wrapped, list) and len(wrapped) == 1 and values_match(value, wrapped[0], self.float_tol)

    async def ascore(self, x: RewardInput) -> RewardResult:
        try:
            tests = parse_tests(x.ground_truth)
        except (ValueError, TypeError, KeyError) as e:
            return RewardResult.failed(f"unusable code tests: {e}")
        code = extract_code(x.response, self.extract)
        if code is None:
            return RewardResult(0.0, {"no_code": 1.0, "correct": 0.0, "pass_rate": 0.0})
        result = await self.sandbox.arun(code, [t.case for t in tests], fail_fast=self.fail_fast)
        if result.error:
            return RewardResult.failed(f"sandbox: {result.error}")
        passed = [self.passed(t, o, tok) for t, o, tok in zip(tests, result.tests, result.tokens, strict=True)]
        rate = sum(passed) / len(passed)
        statuses = [o.status for o in result.tests]
        failures = [failure(t, o) for t, o, ok in zip(tests, result.tests, passed, strict=True) if not ok]
        metrics = {"no_code": 0.0, "correct": float(all(passed)), "pass_rate": rate,
                   **{name: float(failures.count(name)) for name in FAILURES},
                   "cpu_s": sum(o.cpu_s for o in result.tests),
                   # tests run as written (could not be parsed), against the program's plain answers
                   "unparsed_asserts": float(sum(t.case.kind == "assert" for t in tests)),
                   # 1: whole-program limits by the kernel (cgroups); 0: per-process rlimits only
                   "kernel_limits": float(self.sandbox.cgroup is not None),
                   # 1: namespaces, read-only root, seccomp; 0: weak (the program can reach your files)
                   "strict_isolation": float(self.sandbox.mode == "strict"),
                   "memory_peak_mb": result.memory_peak_mb}
        if any(s == "setup_error" for s in statuses):
            detail = next(o.stderr for o in result.tests if o.status == "setup_error")
            return RewardResult.failed(f"the sandbox could not set up a test process: {detail[-300:]}")
        return RewardResult(rate if self.partial_credit else float(all(passed)), metrics)

    def close(self) -> None:
        self.sandbox.close()
