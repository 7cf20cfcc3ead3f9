"""The one exception type the faces (CLI, API) turn into a single clear line."""


class ClockfabricError(Exception):
    """A problem the user can fix: the message says what is wrong and how to fix it."""


# The exit status of a command used wrongly (a bad flag, a missing file, a value out of range):
# sysexits' EX_USAGE. Never one of the audit's verdicts (0 ok, 1 warn, 2 fail, 3 unknown), so a
# typo in a Slurm prolog or a health check can never read as a failing node.
USAGE_EXIT = 64
