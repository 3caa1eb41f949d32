"""Errors a user sees as one line and a non-zero exit.

Anything raised as a `TwinError` (or subclass) reaches the CLI, which prints its
message on one line and exits with `exit_code`. Nothing else should be caught
there: a bug should show its traceback.
"""


class TwinError(Exception):
    """A user-facing failure: bad input, missing file, refused request.

    Args:
        message: one line that says what is wrong and, where possible, how to fix it.
    """

    exit_code: int = 2


class NotImplementedYet(TwinError):
    """A command that exists in the CLI but whose capability has not landed."""


class Interrupted(TwinError):
    """The user interrupted a run; it can be resumed."""

    exit_code = 130


class StopSignal(KeyboardInterrupt):
    """SIGTERM (a scheduler, `kill PID`) or SIGHUP (the terminal closed) asked twin to stop.

    A `KeyboardInterrupt`, so that it takes Ctrl-C's path everywhere: sandboxes killed, mounts
    released, the run saved as stopped and resumable.

    Args:
        name: the signal's name (`SIGTERM`, `SIGHUP`).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class InfraFailure(TwinError):
    """The run failed for infrastructure reasons (model provider, sandbox): not the agent's doing.

    Benches retry such trials and never score them as 0.
    """

    exit_code = 3


class RunFailed(TwinError):
    """A run ended `failed` (twin's own error met on the way): its rounds are graded and kept, and
    `twin migrate` exits non-zero so no caller mistakes it for a run that went well.

    Benches score such a trial as it was graded (`harness.bench.trials`).
    """

    exit_code = 4


class BudgetExceeded(TwinError):
    """A budget limit was reached; the loop turns this into a clean stop.

    Attributes:
        kind: which limit: 'tokens', 'dollars', 'calls' or 'wall_time'.
        limit: the configured limit.
        used: how much was used when the check failed.
    """

    def __init__(self, kind: str, limit: float, used: float) -> None:
        self.kind = kind
        self.limit = limit
        self.used = used
        super().__init__(f"{kind} budget exhausted: used {_fmt(used)} of {_fmt(limit)}")

    def __reduce__(self):  # keep it picklable across processes
        return (type(self), (self.kind, self.limit, self.used))


def _fmt(value: float) -> str:
    return f"{value:g}" if isinstance(value, int) or float(value).is_integer() else f"{value:.4g}"
