"""The one base class of errors caused by user input.

A config, a data file, a model path or a command-line argument that cannot work raises a
subclass of ``UserInputError``; the CLI turns it into exit code 2 and prints its message,
which says what was wrong, where, and what to do. Everything else is a runtime failure
(exit code 1).
"""


class UserInputError(ValueError):
    """Bad input from the user: config, data, paths, arguments."""
