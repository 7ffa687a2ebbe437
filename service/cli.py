"""`voxpool serve`: the server's own command line (the `voxpool` command in voxpool_cli dispatches here)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `serve`."""
    p.add_argument("--config", help="YAML config file (see deploy/config/voxpool.yaml)")
    p.add_argument("--port", type=int, help="gRPC port (default 50051)")
    p.add_argument("--voice", help="default voice name or folder (default baker-zh)")
    p.add_argument("--backend", choices=["engine", "naive", "non_incremental"], default="engine",
                   help="synthesis backend: the pooled engine (default) or a baseline, for side-by-side benchmarks")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; the exit code of service.server.serve (non-zero when a drain cut calls)."""
    from service.config import ConfigError, load_config
    from service.server import run_server

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"voxpool: {exc}", file=sys.stderr)
        return 2
    from service.telemetry.logs import configure_logging  # telemetry: level and JSON lines from the config

    configure_logging(cfg.telemetry, verbose=getattr(args, "verbose", False))
    if args.port is not None:
        cfg.server.port = args.port
    if args.voice is not None:
        cfg.voice.default = args.voice
    try:
        return run_server(cfg, backend=args.backend)
    except startup_errors() as exc:  # what the operator must change, on one line (no traceback)
        print(f"voxpool serve: {one_line(exc)}", file=sys.stderr)
        return 2


def startup_errors() -> tuple[type[BaseException], ...]:
    """Errors of a start that a person fixes (a port, a voice name or folder, a config file), not bugs."""
    from models.checkpoint import CheckpointError
    from models.voices.install import VoiceInstallError
    from models.voices.registry import VoiceNotFound
    from service.config import ConfigError
    from service.server import BindError

    return BindError, VoiceNotFound, CheckpointError, VoiceInstallError, ConfigError


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (a LookupError's str() is its repr)."""
    text = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m service.cli serve [options]` (the same as `voxpool serve`)."""
    p = argparse.ArgumentParser(prog="python -m service.cli", description="run the voxpool gRPC service")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_arguments(sub.add_parser("serve", help="run the gRPC service"))
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
