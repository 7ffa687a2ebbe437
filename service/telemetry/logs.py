"""Logging setup: plain or JSON lines, each carrying the request id and trace id of the call it was logged in."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO, Any

from service.telemetry.calls import current_call

# Attributes every LogRecord has; anything else on a record came from `extra=` and goes into the JSON object.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_IDS = ("request_id", "session_id", "trace_id", "span_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [req=%(request_id)s trace=%(trace_id)s]: %(message)s"


class CallContextFilter(logging.Filter):
    """Stamps request_id, session_id, trace_id and span_id on every record ("" outside a call)."""

    def filter(self, record: logging.LogRecord) -> bool:
        call = current_call()
        if call is None:
            for name in _IDS:
                if not hasattr(record, name):
                    setattr(record, name, "")
        else:
            record.request_id = call.request_id or call.session_id
            record.session_id = call.session_id
            record.trace_id = call.trace_id
            record.span_id = call.span_id
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the ids, `extra=` fields, exception text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _IDS:
            out[name] = getattr(record, name, "")
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def make_handler(json_logs: bool, stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler with the call-context filter and the chosen format."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(CallContextFilter())
    handler.setFormatter(JsonFormatter() if json_logs else logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(cfg: Any, verbose: bool = False, stream: IO[str] | None = None) -> logging.Handler:
    """Replace the root handlers with one that follows TelemetryConfig (log_level, json_logs); returns it."""
    level_name = "DEBUG" if verbose else str(cfg.log_level).upper()
    level = logging.getLevelName(level_name)
    if not isinstance(level, int):
        raise ValueError(f"telemetry.log_level: {cfg.log_level!r} is not a logging level (DEBUG, INFO, WARNING, ...)")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler = make_handler(bool(cfg.json_logs), stream)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
