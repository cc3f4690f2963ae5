"""Credentials never leave the process: the password (or token) of a URL is masked in every text sdpa-bench prints
or writes, as pip masks it in its own messages.

    redact("--extra-index-url https://__token__:SECRET@host/simple")
        -> "--extra-index-url https://__token__:****@host/simple"
    redact("git+https://TOKEN@host/repo")   -> "git+https://****@host/repo"   # a lone user part may be a token
    redact("https://host/p.whl?token=T&x=1#sha256=abc") -> "https://host/p.whl?token=****&x=****#sha256=abc"
    redact("https://host/simple?SECRET")          -> "https://host/simple?****"
    redact("-ihttps://u:SECRET@host/simple")     -> "-ihttps://u:****@host/simple"   # a short option glued on
    redact("--proxy u:SECRET@proxy:3128")        -> "--proxy u:****@proxy:3128"      # pip's proxy, no scheme
    redact("... with url: /p.whl?token=SECRET")  -> "... with url: /p.whl?token=****"  # pip quoting a request

Every value of a URL's query is masked: a signed or token URL carries its secret there, under any name.
"""
from __future__ import annotations

import re

MASK = "****"
# scheme://[user][:password]@ — the user part of a URL, up to the last @ before the host's first /; a password
# may hold a space (shell-escaped, or quoted, as pip takes it) where an @ follows in the same word. Where no @ comes
# before the first /, a password typed with an unencoded / (no valid URL, but printed before pip refuses it) runs
# to the first @ (user2, password2), unless the user part holds a [ or an @ (an IPv6 host, ssh's git@host) or the
# password starts as a port does (host:8443/repo.git@v1 and host:/r.git@v1 name a revision, not a password)
# A scheme starts a word, or follows a short option it is glued to (-ihttps://..., as pip takes it).
_START = r"(?:(?<![A-Za-z0-9+.-])|(?<=(?<![A-Za-z0-9+.-])-[A-Za-z]))"
_USERINFO = re.compile(rf"(?P<scheme>{_START}[A-Za-z][A-Za-z0-9+.-]*://)(?:"
                       r"(?P<user>[^\s/:]*)(?::(?P<password>(?:\\.|[^\s/\\]|[ \t](?=[^\s/]*@))*))?"
                       r"|(?P<user2>[^\s/:@\[]*):(?P<password2>(?!\d*(?:[/?#]|$))[^\s@]*/[^\s@]*))@")


def _mask(match: re.Match) -> str:
    user = match.group("user") if match.group("user2") is None else match.group("user2")
    if match.group("password") is not None or match.group("password2") is not None:
        return f"{match.group('scheme')}{user}:{MASK}@"
    return f"{match.group('scheme')}{MASK}@"


# a URL ends at a quote, also one escaped in JSON text (a backslash before anything else stays in it, masked with
# its value), or at a backtick (a Markdown code span)
_URL = re.compile(rf"{_START}[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s'\"<>\\`]|\\(?!\"))*")
# pip's --proxy takes [user:passwd@]proxy.server:port, with no scheme
_PROXY = re.compile(r"(?P<head>--proxy(?:=|\s+)['\"]?(?:[A-Za-z][A-Za-z0-9+.-]*://)?)(?P<user>[^\s:@/'\"]*):[^\s@]*@")
# a URL's path and query with no scheme, as pip and urllib3 quote it in an error ("... with url: /p.whl?token=T")
_PATH = re.compile(r"(?<=with url: )/(?:[^\s'\"<>\\`]|\\(?!\"))*")
# punctuation that closes the prose around a URL: kept after the masked query, not masked with its last value
_CLOSING = re.compile(r"[)\]}.,:;!]+$")


def _mask_query(match: re.Match) -> str:
    url, mark, rest = match.group(0).partition("?")
    if not mark:
        return url
    closing = _CLOSING.search(rest)
    tail = closing.group(0) if closing else ""
    rest = rest[:len(rest) - len(tail)]
    query, hash_mark, fragment = rest.partition("#")  # the fragment (#sha256=...) is a pin, not a secret
    parts = re.split(r"([&;])", query)  # each value masked whole (a key alone, `?SECRET`, may be the secret)
    masked = [p if p in "&;" else (p.split("=", 1)[0] + "=" + MASK if "=" in p else MASK) for p in parts if p]
    return f"{url}?{''.join(masked)}{hash_mark}{fragment}{tail}"


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it masked (user:password -> user:****, a lone user -> ****, every
    query value -> ****)."""
    text = _PROXY.sub(lambda m: f"{m.group('head')}{m.group('user')}:{MASK}@", _USERINFO.sub(_mask, text))
    return _PATH.sub(_mask_query, _URL.sub(_mask_query, text))
