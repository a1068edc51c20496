"""Procedural tasks: the built-in ``arithmetic`` and any ``reasoning_gym:<dataset>``."""

from rlxf.data.tasks import arithmetic as _arithmetic  # noqa: F401 - registers the built-in task
from rlxf.data.tasks import guess_number as _guess_number  # noqa: F401 - registers the built-in task
from rlxf.data.tasks.base import (
    REASONING_GYM_PREFIX,
    Task,
    TaskItem,
    check_disjoint,
    get_task,
    register_task,
    task_names,
    task_option_models,
)

__all__ = ["REASONING_GYM_PREFIX", "Task", "TaskItem", "check_disjoint", "get_task", "register_task", "task_names",
           "task_option_models"]
