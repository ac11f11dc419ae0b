"""Binding ``serve``'s listening socket before anything else happens.

The socket is bound when the settings are checked, before the policy, the cluster file
or the API server are touched: a busy port or a host that is not an address of this
machine is then one line naming the flag to change (exit status 2, like any other bad
setting), instead of a trace after the cluster state was loaded and logged. The
socket is then served as it is (``web.SockSite``), so nothing can take the port in
between.
"""

from __future__ import annotations

import errno
import os
import socket

from extender.settings import SettingsError

# Which flag to name for an errno: the address part or the port part of host:port.
_HOST_ERRORS = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT})
_PORT_ERRORS = frozenset({errno.EADDRINUSE, errno.EACCES})


def listen_error(host: str, port: int, exc: OSError, *, port_flag: str = "--port") -> str:
    """One line naming the flag to fix: ``port_flag`` for a busy or privileged port,
    ``--host`` for an address this machine does not have or a name that does not
    resolve."""
    where = f"cannot listen on {host}:{port}"
    if isinstance(exc, socket.gaierror):
        return f"--host {host}: {where}: cannot resolve the name ({exc.strerror or exc})"
    # socket.create_server appends the address to strerror; the line names it already.
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    if exc.errno in _PORT_ERRORS:
        return f"{port_flag} {port}: {where}: {reason}"
    if exc.errno in _HOST_ERRORS:
        return f"--host {host}: {where}: {reason} (not an address of this machine)"
    return f"--host {host} {port_flag} {port}: {where}: {reason}"


# A host as the error line shows it: a name of any length fits in one readable line.
_HOST_SHOWN = 80


def host_error(host: str, port: int, exc: ValueError) -> str:
    """One line naming --host for a name that is not a host name at all."""
    shown = host if len(host) <= _HOST_SHOWN else host[: _HOST_SHOWN - 3] + "..."
    # "encoding with 'idna' codec failed (UnicodeError: label too long)": the reason is
    # the part in brackets.
    reason = str(exc)
    if "(" in reason and reason.endswith(")"):
        reason = reason[reason.index("(") + 1 : -1].removeprefix("UnicodeError: ")
    return f"--host {shown}: cannot listen on {shown}:{port}: not a host name ({reason})"


def bind_listener(host: str, port: int, *, port_flag: str = "--port") -> socket.socket:
    """A listening, non-blocking socket on the first address ``host`` resolves to (as
    aiohttp's TCPSite binds a single address such as 0.0.0.0). Raises SettingsError
    naming ``port_flag`` (``--admission-port`` for the webhook's listener) or ``--host``."""
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.create_server(address, family=family, backlog=128)
    except OSError as exc:
        raise SettingsError(listen_error(host, port, exc, port_flag=port_flag)) from None
    except ValueError as exc:
        # Before any lookup: the name cannot even be encoded for one. A label over 63
        # characters or an empty one fails the IDNA codec (a UnicodeError), a NUL byte
        # fails getaddrinfo's own check.
        raise SettingsError(host_error(host, port, exc)) from None
    sock.setblocking(False)
    return sock
