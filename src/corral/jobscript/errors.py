"""The one exception the job-script layer raises."""
from __future__ import annotations


class DirectiveError(ValueError):
    """A job script or submit option that cannot be turned into a submission.

    The message is meant for the user as is: it names the option, the value and, for #SBATCH
    directives, the script line. `reason` is the part without the value, for callers that name the
    value themselves.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message
