"""Log setup: one line per event, as text or JSON, never a stack trace for client errors."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

# Attributes every LogRecord has; anything else was passed with extra={...}.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extras(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        # The event's line first, extras on it; a traceback (our own bugs only) after.
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in extras.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    text = str(value)
    # One event, one line: a value carrying a line break (say, a node name from a
    # request) is quoted, so it cannot forge a second log line.
    return repr(text) if "\n" in text or "\r" in text else text


class CommandFormatter(logging.Formatter):
    """For the operator commands: ``prog: warning: message key=value ...``, like their
    error lines, without the timestamp and logger name a service log needs."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self._prog = prog

    def format(self, record: logging.LogRecord) -> str:
        line = f"{self._prog}: {record.levelname.lower()}: {record.getMessage()}"
        extras = {k: v for k, v in _extras(record).items() if v not in ("", None)}
        if extras:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in extras.items())
        return line


def setup_command_logging(prog: str, level: str = "warning") -> None:
    """Warnings of the operator commands (explain, classes, ...) as one line each on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(CommandFormatter(prog))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is one line per scheduler call: far too chatty at info.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
