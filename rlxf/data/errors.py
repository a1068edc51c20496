"""The one error type of the data layer: a message that says what, where, and what to do."""

from __future__ import annotations

from rlxf.errors import UserInputError


class DataError(UserInputError):
    """Bad or unusable data (a malformed file line, a missing field, an empty dataset)."""
