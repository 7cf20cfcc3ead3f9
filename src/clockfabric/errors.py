"""The one exception type the faces (CLI, API) turn into a single clear line."""


class ClockfabricError(Exception):
    """A problem the user can fix: the message says what is wrong and how to fix it."""
