"""The one error type for bad operator input, reported as one line with exit status 2."""


class InputError(ValueError):
    """A flag, file or setting the operator must fix; the message says which and why."""
