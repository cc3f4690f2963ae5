"""Credentials never leave the process: the password (or token) of a URL is masked in every text sdpa-bench prints
or writes, as pip masks it in its own messages.

    redact("--extra-index-url https://__token__:SECRET@host/simple")
        -> "--extra-index-url https://__token__:****@host/simple"
    redact("git+https://TOKEN@host/repo")   -> "git+https://****@host/repo"   # a lone user part may be a token
"""
from __future__ import annotations

import re

MASK = "****"
# scheme://[user][:password]@ — the user part of a URL, up to the last @ before the host's first /
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/:]*)(?::(?P<password>[^\s/]*))?@")


def _mask(match: re.Match) -> str:
    if match.group("password") is not None:
        return f"{match.group('scheme')}{match.group('user')}:{MASK}@"
    return f"{match.group('scheme')}{MASK}@"


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it masked (user:password -> user:****, a lone user -> ****)."""
    return _USERINFO.sub(_mask, text)
