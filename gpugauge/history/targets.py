"""What a history target is, and how it is shown: a path, a URL, a libpq string; no password.

A target is a SQLite path, a ``postgresql://`` (or ``postgres://``) URL, or a libpq
``key=value`` string (``host=db dbname=h user=u password=…``), which is a server and never
a file named after it. :func:`redact` is the one way a target is shown in a line or an
error: a URL's userinfo password, its ``?password=`` parameter and a ``key=value``
``password=`` become ``***``; :func:`hide` takes the same passwords out of a driver's own
message (libpq quotes parts of a malformed string back).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

_CONNINFO_KEYS = (
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "service",
    "sslmode",
    "connect_timeout",
    "options",
    "application_name",
    "target_session_attrs",
)
_CONNINFO = re.compile(rf"^\s*({'|'.join(_CONNINFO_KEYS)})\s*=", re.IGNORECASE)
# password=VALUE in a libpq string: VALUE is 'quoted' (with \' and \\ escapes) or bare
_CONNINFO_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def is_local(target: str | Path) -> bool:
    """Whether ``target`` names a SQLite file (not a URL, not a libpq ``key=value`` string)."""
    text = str(target)
    return SCHEME.match(text) is None and not is_conninfo(text)


def is_conninfo(target: str) -> bool:
    """Whether ``target`` is a libpq ``key=value`` string ('host=db dbname=h user=u')."""
    return bool(_CONNINFO.match(target))


def redact(target: str) -> str:
    """``target`` as it may be shown: every password replaced by '***'.

    The one helper for every line and error that names a history: a URL's userinfo
    ('postgresql://user:***@host/db'), its ``?password=`` parameter, and a libpq
    ``key=value`` string's ``password=``. A path has none and is returned as it is.
    """
    text = _CONNINFO_PASSWORD.sub(r"\1***", target) if is_conninfo(target) else target
    match = SCHEME.match(text)
    if match is None:
        return text
    text = _QUERY_PASSWORD.sub(r"\1***", text)
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:  # a malformed netloc: hide everything between '//' and '@'
        return re.sub(r"//[^@/]*@", "//***@", text)
    if password is None:
        return text
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def passwords(target: str) -> list[str]:
    """The password values ``target`` holds (for removing them from a driver's messages)."""
    found = [m.group(2) for m in _QUERY_PASSWORD.finditer(target)]
    if is_conninfo(target):
        found += [m.group(2).strip("'") for m in _CONNINFO_PASSWORD.finditer(target)]
    elif SCHEME.match(target):
        with contextlib.suppress(ValueError):
            found.append(urlsplit(target).password or "")
    return [f for f in found if f]


def hide(text: str, target: str) -> str:
    """``text`` (a message) with every password of ``target`` replaced by '***'."""
    for secret in sorted(passwords(target), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
