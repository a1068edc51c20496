"""Claims the README makes that a test can hold it to (issue 17.12)."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _quickstart_section() -> str:
    start = README.index("## What the quickstart shows")
    return README[start:README.index("\n## ", start + 1)]


def test_reproducibility_claim_is_bounded_to_one_cpu_type_and_library_versions():
    text = " ".join(_quickstart_section().split())
    assert "on any run" not in text  # bit-for-bit holds on one CPU type, not everywhere
    assert "same CPU type" in text and "library versions" in text


def test_quickstart_table_names_the_cpu_it_was_measured_on():
    section = _quickstart_section()
    # every table of measured seeds names its CPU (as /proc/cpuinfo spells it) in the text before it
    starts = [m.start() for m in re.finditer(r"^\| seed \|", section, flags=re.M)]
    assert starts
    for before, at in zip([0, *starts], starts):
        assert re.search(r"AMD EPYC|Intel\(R\) Xeon\(R\)", section[before:at]), section[at:at + 80]


def test_quickstart_time_is_not_promised_as_one_figure():
    intro = README[:README.index("## What the quickstart shows")]
    assert "about 4 minutes" not in intro and "Intel Xeon" in intro
