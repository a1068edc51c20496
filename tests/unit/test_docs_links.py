"""The docs' links, file references and preset claims hold against the tree and the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md")),
        ROOT / "benchmarks" / "README.md"]


def _prose(path: Path) -> str:
    """The markdown without its fenced code blocks."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_from_the_linking_file(doc):
    missing = []
    for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", _prose(doc)):
        path = target.split("#", 1)[0]
        if target.startswith(("http://", "https://", "mailto:")) or not path:
            continue
        if not (doc.parent / path).exists():
            missing.append(target)
    assert not missing, f"{doc.relative_to(ROOT)}: links to missing files (relative to its folder): {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_top_level_markdown_files_exist(doc):
    # e.g. a design document cited by name must be in the repository
    named = set(re.findall(r"\b([A-Z][A-Z_]+\.md)\b", _prose(doc)))
    assert all((ROOT / n).exists() or (doc.parent / n).exists() for n in named), named


def _readme_algorithm_rows() -> dict[str, str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Algorithms"):]
    section = section[:section.index("\n\n", section.index("| `algorithm.name`"))]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", section, flags=re.M)}


def test_readme_algorithm_table_names_every_preset():
    from rlxf.config.algorithm import PRESETS

    assert set(_readme_algorithm_rows()) == set(PRESETS)


def test_readme_does_not_credit_a_preset_with_a_reward_kl_it_does_not_set():
    from rlxf.config.algorithm import AlgorithmConfig

    for name, what in _readme_algorithm_rows().items():
        preset = AlgorithmConfig(name=name)
        # a "KL as a reward penalty" that the preset itself does not set must be attributed to the example
        if "KL as a reward penalty" in what and preset.kl_mode != "reward":
            assert "example" in what, (name, what)

