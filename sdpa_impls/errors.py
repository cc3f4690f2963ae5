"""Errors a user can fix: raised anywhere below, caught once by the command line (exit status 2).

Nothing in the package imports `cli`; lower layers raise these and the command line prints one line.
"""
from __future__ import annotations

USAGE_EXIT = 2


class UsageError(Exception):
    """A mistake the user can fix (bad name, bad path, bad file): printed as one line, exit status 2."""


class GateInputError(UsageError):
    """An input the gate cannot use (missing, corrupt or truncated file, bad config); the message says which."""


class SideError(GateInputError):
    """One side of a comparison does not install, import or run; `role` says which ("base" or "head"), so a search
    over revisions can skip that revision instead of giving up."""

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role
