"""The one exception type a user can cause: the CLI prints its one line and exits non-zero;
anything else is a bug and keeps its traceback."""


class PolyplanError(Exception):
    """A user-facing error: the message names the culprit and says what is wrong."""


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (its type name when the message is empty): what a
    one-line `PolyplanError` quotes of a library's multi-line error."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
