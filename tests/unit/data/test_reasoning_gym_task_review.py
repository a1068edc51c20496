"""reasoning-gym task options that the dataset's constructor trips on are data errors (outside review)."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym")

from rlxf.data.errors import DataError  # noqa: E402
from rlxf.data.tasks import get_task  # noqa: E402


def test_composite_points_to_a_mixture_instead_of_crashing():
    # its `datasets` option wants DatasetSpec objects: YAML's dicts raised AttributeError
    with pytest.raises(DataError, match=r"reasoning_gym:composite is not supported.*data\.sources"):
        get_task("reasoning_gym:composite", {"datasets": [{"name": "leg_counting", "weight": 1.0}]})


def test_options_that_break_every_item_are_refused_when_the_task_is_made():
    # the constructor accepts an unknown problem type; making an item raised UnboundLocalError mid-run
    options = {"problem_types": ["nope"], "problem_type_weights": [1.0]}
    with pytest.raises(DataError, match=r"intermediate_integration' rejects data.task_options .*Its options: .*problem_types"):
        get_task("reasoning_gym:intermediate_integration", options)
