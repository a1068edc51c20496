"""The base class every config section derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, values never change after loading.

    Every field carries its documentation in ``Field(description=...)``; ``rlxf config-docs``
    prints them. Validate cross-field rules in ``model_validator(mode="after")`` and raise
    ``ValueError`` with a message that names the fields and says what to do.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
