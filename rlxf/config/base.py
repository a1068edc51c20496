"""The base class every config section derives from."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator


class Section(BaseModel):
    """A config section: unknown keys are errors, numbers are finite, values never change after loading.

    Every field carries its documentation in ``Field(description=...)``; ``rlxf config-docs``
    prints them. Validate cross-field rules in ``model_validator(mode="after")`` and raise
    ``ValueError`` with a message that names the fields and says what to do.
    """

    # a non-finite number is never a setting: an lr of .inf makes every weight nan at the first
    # step, a timeout of .inf overflows the wait it bounds, a weight of .nan makes every reward nan
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, data: Any) -> Any:
        # pydantic reads true as 1 for an int field, and YAML reads yes/no/on/off as booleans,
        # so `steps: yes` would run one step without a word
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and field is not None:
                    leaves = _leaf_types(field.annotation)
                    if leaves & {int, float} and not leaves & {bool, Any, object}:
                        raise ValueError(f"{name}: expected a number, got {str(value).lower()} (YAML reads "
                                         f"true/false, yes/no and on/off as booleans)")
        return data

def _leaf_types(annotation: Any) -> set:
    """The types a field's annotation is made of: ``int | None`` -> {int, NoneType}; a Literal
    holding True or False counts as bool."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return {bool} if any(isinstance(a, bool) for a in typing.get_args(annotation)) else {str}
    if origin in (typing.Union, types.UnionType) or origin is typing.Annotated:
        args = typing.get_args(annotation)
        return set().union(*(_leaf_types(a) for a in (args[:1] if origin is typing.Annotated else args)))
    return {annotation}
