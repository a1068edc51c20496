"""Score reasoning-gym tasks with the task's own scorer.

The sample's ground truth is the reasoning-gym entry (``{"question", "answer", "metadata"}``)
as the dataset produced it. The dataset is looked up by, in order: the entry's
``metadata["source_dataset"]`` (reasoning-gym sets it), the sample metadata's
``reasoning_gym_dataset``, or a ``task`` of the form ``reasoning_gym:<name>``, or the
verifier's ``dataset`` option. Dataset options (some scorers depend on them) come from the
sample metadata's ``task_options`` (``rlxf.data`` puts ``task`` and ``task_options`` there).
The score is ``dataset.score_answer(answer, entry)`` in [0, 1], where the answer is the text
of the last ``<answer>...</answer>`` (the format reasoning-gym's prompts ask for), or the
whole response if it has no tag -- the same rule as ``rlxf.data``'s task scorer, so rewards
and task accuracy agree -- unless ``require_tag``. Either is looked for after the reasoning
(``rlxf.rewards.extract.after_reasoning``): a ``<think>`` block is not the answer.

The answer is the policy's text, and some scorers run it: several ``eval`` it as Python
(string_insertion, spiral_matrix, binary_matrix, n_queens: "is the answer a Python list?"), and
others parse it with sympy's ``parse_expr``, which ``eval``s a rewritten form of it (countdown,
puzzle24, the integration and polynomial tasks). ``score_answer_safely`` (used here and by the
task) reads each scorer's source once. Where it finds Python's ``eval`` of the answer, that
module's ``eval`` becomes ``literal_eval``: a list still reads as a list, and
``__import__('os')...`` or ``oracle_answer`` (the scorer's own variable) no longer run. Where it
finds sympy's parser, an answer is scored only if its syntax tree can neither call nor reach
anything (no call but to a math function, no attribute, comprehension, lambda or f-string) nor
compute something huge (no power of a power, no exponent above 1000, no repeated or formatted
string): anything else scores 0 (metric ``unsafe``). An answer there that calls ``Integral``
(which the integration scorers differentiate back into the integrand: the question restated)
or another operator sympy keeps unevaluated (``unevaluated_operator``) scores 0 too
(``unevaluated``), whatever the reference: a reference that calls one is sympy's failure to
solve, not a solution (``rlxf.data``'s task leaves such items out). The arithmetic puzzles
(countdown, puzzle24) take ``+ - * /`` and parentheses over the puzzle's own numbers, each
once, as their rules say: ``sqrt(9)*...`` or other numbers score 0 (``disallowed``). An
exception the scorer raises on an answer scores 0 too (``unscorable``) when the reference answer
scores: "I don't know" is a wrong answer, not a broken verifier.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import unicodedata
from dataclasses import dataclass
from typing import Any

from rlxf.errors import MissingExtraError
from rlxf.rewards.base import SyncVerifier
from rlxf.rewards.extract import after_reasoning
from rlxf.rewards.extract import answer_tag as tag_content
from rlxf.rewards.types import RewardInput, RewardResult

# what in a scorer's own source runs (part of) the answer as code: Python's eval/exec, or
# sympy's parsers (which eval a rewritten form of it)
_PYTHON_EVAL = re.compile(r"(?<![\w.])(?:eval|exec)\s*\(")
_SYMPY_PARSE = re.compile(r"\b(?:parse_expr|sympify|simplify|S)\s*\(")
# the functions an answer to a calculus or algebra task may call (sympy's names)
_MATH_FUNCTIONS = frozenset(
    "sin cos tan cot sec csc asin acos atan acot sinh cosh tanh coth asinh acosh atanh exp log ln "
    "asec acsc acoth atan2 sqrt Abs abs sign erf Integral".split())
_MAX_EXPONENT = 1000
# sympy's operators that stay unevaluated when it cannot compute them: an answer calling one
# restates the question ("the integral of f") instead of answering it
_UNEVALUATED = frozenset({"Integral", "Derivative", "Limit", "Sum", "Product"})
# puzzles whose rules allow + - * / and parentheses over the puzzle's own numbers, each once:
# their scorers evaluate any sympy expression (sqrt(9), 3**2), and puzzle24's counts the
# numbers without reading which they are (6*4+1-1 "makes 24 from 1, 3, 5, 9")
_ARITHMETIC_PUZZLES = frozenset({"countdown", "puzzle24"})
_ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub,
                     ast.UAdd)
_MAX_LITERAL_CHARS = 100_000


@dataclass(frozen=True)
class _Hazards:
    python_eval: bool   # evals the answer as Python, and its module's eval could not be made literal-only
    sympy_parse: bool   # parses it with sympy


_hazards: dict[type, _Hazards] = {}


def literal_eval(text: str) -> Any:
    """What reasoning-gym's scorers mean by ``eval(answer)`` ("is the answer a Python list?"):
    a literal only, which can neither run nor reach anything."""
    if len(text) > _MAX_LITERAL_CHARS:
        raise ValueError("answer too long to read as a literal")
    return ast.literal_eval(text)


def _scorer_hazards(dataset: Any) -> _Hazards:
    """How a dataset's ``score_answer`` treats the answer, from its source (the worst case when
    the source cannot be read). Where it ``eval``s the answer and every ``eval`` of its module is
    in ``score_answer``, that module's ``eval`` becomes ``literal_eval`` (a module global is
    found before the builtin), so the scorer keeps its meaning and runs no answer."""
    cls = type(dataset)
    if cls in _hazards:
        return _hazards[cls]
    module = sys.modules.get(cls.score_answer.__module__)
    try:
        source = inspect.getsource(cls.score_answer)
        module_source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        _hazards[cls] = _Hazards(python_eval=True, sympy_parse=True)
        return _hazards[cls]
    python_eval = bool(_PYTHON_EVAL.search(source))
    if python_eval and "exec" not in _PYTHON_EVAL.findall(source)[0] and (
            len(_PYTHON_EVAL.findall(source)) == len(_PYTHON_EVAL.findall(module_source))):
        module.eval = literal_eval   # type: ignore[union-attr]
        python_eval = False
    _hazards[cls] = _Hazards(python_eval=python_eval, sympy_parse=bool(_SYMPY_PARSE.search(source)))
    return _hazards[cls]


def _harmless(node: ast.AST, names: bool) -> bool:
    """Whether evaluating this expression can only build a value of about its own size and
    reaches nothing but the names given to it (``names``: sympy's parsers make symbols of
    names; Python's eval would read the scorer's own variables, the reference answer too)."""
    if isinstance(node, ast.Call):
        return (names and isinstance(node.func, ast.Name) and node.func.id in _MATH_FUNCTIONS
                and not node.keywords and all(_harmless(a, names) for a in node.args))
    if isinstance(node, (ast.Attribute, ast.Lambda, ast.NamedExpr, ast.JoinedStr, ast.FormattedValue,
                         ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Await, ast.Yield,
                         ast.YieldFrom, ast.Starred)):
        return False
    if isinstance(node, ast.Name) and (not names or node.id.startswith("__")):
        return False
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, (ast.LShift, ast.RShift)):
            return False
        if isinstance(node.op, ast.Pow):   # 9**9**9, 9**(10**6): one operation, no end to it
            exponent = node.right
            if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in ast.walk(exponent)):
                return False
            if any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float, complex))
                   and abs(n.value) > _MAX_EXPONENT for n in ast.walk(exponent)):
                return False
        if isinstance(node.op, (ast.Mult, ast.Mod, ast.Pow)):  # "a" * 10**9, "%999999999d" % 1
            sized = (ast.List, ast.Tuple, ast.Set, ast.Dict)
            if any(isinstance(n, sized) or (isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)))
                   for side in (node.left, node.right) for n in ast.walk(side)):
                return False
    return all(_harmless(child, names) for child in ast.iter_child_nodes(node))


def answer_is_safe_to_run(answer: str, *, sympy: bool) -> bool:
    """Whether Python's ``eval`` of this answer (or, ``sympy``, sympy's ``parse_expr``) can
    neither reach anything nor run long: its syntax tree, after the NFKC normalisation Python
    applies to identifiers, passes ``_harmless``. Text that is not a Python expression cannot
    run under ``eval``; ``parse_expr`` rewrites it first (``5!`` becomes a factorial), so
    there it is refused."""
    text = unicodedata.normalize("NFKC", answer)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return not sympy
    try:
        return _harmless(tree.body, names=sympy)
    except RecursionError:
        return False


def _dataset_names(dataset: Any, entry: dict[str, Any]) -> set[str]:
    """The reasoning-gym names a scorer answers for: its class's registered name, and the entry's
    ``source_dataset`` (a composite dataset's scorer passes the entry to the one it came from)."""
    from reasoning_gym.factory import DATASETS  # noqa: PLC0415 - only a reasoning-gym scorer gets here

    names = {name for name, (cls, _config) in DATASETS.items() if cls is type(dataset)}
    source = (entry.get("metadata") or {}).get("source_dataset")
    return names | ({source} if isinstance(source, str) else set())


def plays_by_the_rules(answer: str, numbers: Any) -> bool:
    """Whether an answer to an arithmetic puzzle is ``+ - * /`` and parentheses over integers,
    which are the puzzle's ``numbers`` (each once) if given."""
    try:
        tree = ast.parse(unicodedata.normalize("NFKC", answer).strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
        elif not isinstance(node, _ARITHMETIC_NODES):
            return False   # sqrt(9), 3**2, 9 % 5, 1.5, x
    return not isinstance(numbers, list) or sorted(used) == sorted(int(n) for n in numbers)


def unevaluated_operator(text: str) -> str | None:
    """The sympy operator (``Integral``, ``Derivative``, ``Limit``, ``Sum``, ``Product``) an
    expression calls, read as Python after NFKC, or None."""
    try:
        tree = ast.parse(unicodedata.normalize("NFKC", text).strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return next((n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id in _UNEVALUATED), None)


def parses_with_sympy(dataset: Any) -> bool:
    """Whether a dataset's ``score_answer`` reads answers (and so references) as sympy expressions."""
    return _scorer_hazards(dataset).sympy_parse


def score_answer_safely(dataset: Any, answer: str, entry: dict[str, Any]) -> tuple[float, str | None]:
    """``dataset.score_answer(answer, entry)``, and why the answer was not scored (``unsafe``,
    ``unscorable``) or None. Raises what the scorer raises on the reference answer too."""
    hazards = _scorer_hazards(dataset)
    if ((hazards.python_eval and not answer_is_safe_to_run(answer, sympy=False))
            or (hazards.sympy_parse and not answer_is_safe_to_run(answer, sympy=True))):
        return 0.0, "unsafe"
    if _dataset_names(dataset, entry) & _ARITHMETIC_PUZZLES and not plays_by_the_rules(
            answer, (entry.get("metadata") or {}).get("numbers")):
        return 0.0, "disallowed"
    if hazards.sympy_parse and unevaluated_operator(answer):
        # Integral(<the integrand>, x): the question restated, whose derivative the integration
        # scorers find equal to the integrand, even where the reference is that same Integral
        return 0.0, "unevaluated"
    try:
        return float(dataset.score_answer(answer, entry)), None
    except Exception:  # noqa: BLE001 - the answer's fault if the reference scores
        dataset.score_answer(str(entry.get("answer")), entry)
        return 0.0, "unscorable"


class ReasoningGymVerifier(SyncVerifier):
    def __init__(self, name: str, answer_tag: str | None = "answer", dataset: str | None = None,
                 require_tag: bool = False):
        super().__init__(name)
        try:
            import reasoning_gym  # noqa: PLC0415
        except ImportError as e:
            raise MissingExtraError("the reasoning_gym verifier needs reasoning-gym: pip install 'rlxf[tasks]'") from e
        self._rg = reasoning_gym
        self.answer_tag = answer_tag
        self.require_tag = require_tag
        self.dataset = dataset
        self._datasets: dict[tuple[str, str], Any] = {}

    @classmethod
    def from_config(cls, cfg: Any) -> ReasoningGymVerifier:
        return cls(cfg.label, cfg.answer_tag, cfg.dataset, cfg.require_tag)

    def _name(self, entry: dict[str, Any], metadata: dict[str, Any]) -> str | None:
        name = (entry.get("metadata") or {}).get("source_dataset") or metadata.get("reasoning_gym_dataset")
        task = metadata.get("task")
        if not name and isinstance(task, str) and task.startswith("reasoning_gym:"):
            name = task.partition(":")[2]
        return name or self.dataset

    def _scorer(self, name: str, options: dict[str, Any]) -> Any:
        key = (name, json.dumps(options, sort_keys=True, default=str))
        if key not in self._datasets:
            try:  # one item is enough: only its score_answer is used
                self._datasets[key] = self._rg.create_dataset(name, seed=0, size=1, **options)
            except (ValueError, TypeError, AssertionError):
                if not options:
                    raise
                # options meant for the generator (not its config): the default config scores the same
                self._datasets[key] = self._rg.create_dataset(name, seed=0, size=1)
        return self._datasets[key]

    def score(self, x: RewardInput) -> RewardResult:
        entry = x.ground_truth
        if not isinstance(entry, dict) or "answer" not in entry:
            return RewardResult.failed("the ground truth is not a reasoning-gym entry {question, answer, metadata}")
        name = self._name(entry, x.metadata)
        if not name:
            return RewardResult.failed("cannot tell which reasoning-gym dataset this entry is from: no "
                                       "metadata.source_dataset, no task, no `dataset` option")
        dataset = self._scorer(name, dict(x.metadata.get("task_options") or {}))
        said = after_reasoning(x.response)
        answer = tag_content(said, self.answer_tag) if self.answer_tag else None
        tagged = answer is not None
        if answer is None:
            if self.require_tag and self.answer_tag:
                return RewardResult(0.0, {"tagged": 0.0, "correct": 0.0})
            answer = said.strip()
        value, refused = score_answer_safely(dataset, answer, entry)
        metrics = {"tagged": float(tagged), "correct": float(value >= 1.0)}
        if refused:
            metrics[refused] = 1.0
        return RewardResult(value, metrics)
