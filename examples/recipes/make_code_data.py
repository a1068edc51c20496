"""Write MBPP or HumanEval in the code recipes' JSONL format, one problem a line:

    {"prompt": "<the task, with the tests it must pass>", "tests": ["assert ...", ...],
     "solution": "<the reference program>", "task_id": ...}

``tests`` is what the `code` verifier runs after the response's program (strings are Python
run in the program's namespace; an assert that fails, fails the test). ``solution`` is the
dataset's reference program, kept as metadata (the verifier does not read it): it shows the
tests are right, and is there for warm-starting with SFT.

    python examples/recipes/make_code_data.py mbpp data/code        # mbpp_train.jsonl, mbpp_test.jsonl
    python examples/recipes/make_code_data.py humaneval data/code   # humaneval_test.jsonl (164 problems)

Needs the `datasets` package and the Hugging Face hub (``pip install 'rlxf[datasets]'``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HUB = {"mbpp": ("google-research-datasets/mbpp", "full", ("train", "test")),
       "humaneval": ("openai/openai_humaneval", None, ("test",))}


def mbpp_problem(row: dict[str, Any]) -> dict[str, Any]:
    """An MBPP row (``full``: ``text``; ``sanitized``: ``prompt``) as a recipe problem. MBPP's
    task text does not name the function, so the prompt shows the tests, as the MBPP paper's
    prompts do; setup code and imports the tests need go in front of each test."""
    text = row.get("text") or row["prompt"]
    setup = "\n".join([row.get("test_setup_code") or "", *row.get("test_imports", [])]).strip()
    tests = [f"{setup}\n{t}" if setup else t for t in row["test_list"]]
    prompt = f"{text}\nYour code should pass these tests:\n" + "\n".join(row["test_list"])
    return {"prompt": prompt, "tests": tests, "solution": row["code"], "task_id": row["task_id"]}


def humaneval_problem(row: dict[str, Any]) -> dict[str, Any]:
    """A HumanEval row as a recipe problem: complete the function; its ``check`` is the test."""
    prompt = f"Complete this Python function and return all of it:\n```python\n{row['prompt']}```"
    return {"prompt": prompt, "tests": [f"{row['test']}\ncheck({row['entry_point']})"],
            "solution": row["prompt"] + row["canonical_solution"], "task_id": row["task_id"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=sorted(HUB))
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    import datasets

    name, subset, splits = HUB[args.dataset]
    convert = mbpp_problem if args.dataset == "mbpp" else humaneval_problem
    args.out.mkdir(parents=True, exist_ok=True)
    for split in splits:
        path = args.out / f"{args.dataset}_{split}.jsonl"
        rows = datasets.load_dataset(name, subset, split=split)
        with path.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(convert(dict(row))) + "\n")
        print(f"{path}: {len(rows)} problems")


if __name__ == "__main__":
    main()
