"""`voxpool gateway jambonz`: run the Jambonz custom-TTS vendor endpoint in front of a voxpool server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Sequence

from protos.voxpool.v1 import wire

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="voxpool gateway", description="protocol gateways in front of voxpool")
    sub = p.add_subparsers(dest="kind", required=True)
    j = sub.add_parser("jambonz", help="Jambonz custom TTS vendor: websocket /synthesize (streaming), "
                                       "POST /synthesize (one-shot), GET /healthz")
    j.add_argument("--voxpool", default=os.environ.get("VOXPOOL_TARGET", "localhost:50051"),
                   help="voxpool gRPC target (env VOXPOOL_TARGET; default localhost:50051)")
    j.add_argument("--host", default="0.0.0.0")
    j.add_argument("--port", type=int, default=int(os.environ.get("VOXPOOL_GATEWAY_PORT", "3000")))
    j.add_argument("--api-key-env", default="JAMBONZ_API_KEY",
                   help="environment variable holding the API key jambonz sends as Bearer (unset: no check)")
    j.add_argument("--rate", dest="sample_rate_hz", type=int, choices=wire.SAMPLE_RATES_HZ, default=8000, metavar="HZ",
                   help=f"sample rate when jambonz sends no sampleRate: {wire.sample_rates_text()} (default 8000)")
    j.add_argument("--pacing", choices=["ASAP", "REALTIME"], default="ASAP")
    j.add_argument("--idle-timeout-s", type=float, default=30.0, help="close a socket silent this long")
    j.add_argument("--max-message-bytes", type=int, default=64 * 1024)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `voxpool gateway ...`; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        from clients.integrations.jambonz import GatewayConfig, serve
    except ImportError as exc:
        log.error("the gateway needs its extra: pip install 'voxpool[gateway]' (%s)", exc)
        return 2
    cfg = GatewayConfig(voxpool_target=args.voxpool, host=args.host, port=args.port,
                        api_key=os.environ.get(args.api_key_env, ""), default_rate_hz=args.sample_rate_hz, pacing=args.pacing,
                        idle_timeout_s=args.idle_timeout_s, max_message_bytes=args.max_message_bytes)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(cfg, stop)

    asyncio.run(run())
    return 0
