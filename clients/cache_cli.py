"""`voxpool cache warm FILE` and `voxpool cache stats`: the CacheAdmin RPCs of a running server (its serving port)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Iterator, Sequence

import grpc
from google.protobuf import json_format

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc

MAX_LINE_BYTES = 60_000  # below the serving port's default message limit (server.max_receive_message_bytes, 64 KiB)
DEFAULT_SERVER = "localhost:50051"
TOKEN_ENV = "VOXPOOL_TOKEN"


def _connection(p: argparse.ArgumentParser, timeout_s: float) -> None:
    p.add_argument("--server", default=DEFAULT_SERVER,
                   help=f"the server's gRPC address (its serving port; default {DEFAULT_SERVER})")
    p.add_argument("--tls", action="store_true", help="TLS with the system roots (or --ca-file)")
    p.add_argument("--ca-file", default=None, help="PEM CA bundle to trust (implies --tls)")
    p.add_argument("--timeout", type=float, default=timeout_s, help=f"seconds to wait (default {timeout_s:g})")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="voxpool cache", description="the per-pod segment audio cache of a running server")
    sub = p.add_subparsers(dest="action", required=True)
    w = sub.add_parser("warm", help="synthesize a prompt file's lines into the cache (JSON SynthesizeRequest or text)")
    w.add_argument("file", help="prompt file: one JSON SynthesizeRequest or plain text per line; '#' comments")
    _connection(w, 600.0)
    s = sub.add_parser("stats", help="the cache's counters and size")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _connection(s, 10.0)
    p.epilog = f"With security.auth on, the bearer token is read from ${TOKEN_ENV}."
    return p


def _channel(args: argparse.Namespace) -> grpc.Channel:
    if not (args.tls or args.ca_file):
        return grpc.insecure_channel(args.server)
    roots = Path(args.ca_file).read_bytes() if args.ca_file else None
    return grpc.secure_channel(args.server, grpc.ssl_channel_credentials(roots))


def _metadata() -> tuple[tuple[str, str], ...]:
    token = os.environ.get(TOKEN_ENV, "").strip()
    return (("authorization", f"Bearer {token}"),) if token else ()


def _lines(path: Path, too_long: list[int]) -> Iterator[pb.WarmCacheLine]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if len(line.encode("utf-8")) > MAX_LINE_BYTES:
            too_long.append(number)
            continue
        yield pb.WarmCacheLine(line_number=number, line=line)


def _print_stats(stats: pb.CacheStats) -> None:
    if not stats.enabled:
        print("cache: disabled on this server (cache.enabled: false)")
        return
    mib = 1024 * 1024
    print(f"entries {stats.entries}, {stats.bytes / mib:.1f} of {stats.max_bytes / mib:.0f} MiB")
    print(f"hits {stats.hits}, misses {stats.misses} (coalesced {stats.coalesced}), hit ratio {stats.hit_ratio:.3f}")
    print(f"admitted {stats.admitted}, not admitted: first sighting {stats.rejected_first_sighting}, "
          f"too large {stats.rejected_too_large}; evictions {stats.evictions} ({stats.evicted_bytes / mib:.1f} MiB)")


def _warm(stub: tts_pb2_grpc.CacheAdminStub, args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"voxpool cache: {path} is not a file", file=sys.stderr)
        return 2
    too_long: list[int] = []
    try:
        lines = list(_lines(path, too_long))
    except UnicodeDecodeError as exc:
        print(f"voxpool cache: {path} is not UTF-8 text: {exc}", file=sys.stderr)
        return 2
    report = stub.WarmCache(iter(lines), timeout=args.timeout, metadata=_metadata())
    names = {pb.WarmLineResult.FAILED: "failed", pb.WarmLineResult.TIMED_OUT: "timed out"}
    problems = [(n, f"failed: longer than {MAX_LINE_BYTES} bytes (the server's message limit); split it") for n in too_long]
    problems += [(r.line_number, f"{names.get(r.outcome, 'unknown')}: {r.message}")
                 for r in report.lines if r.outcome != pb.WarmLineResult.WARMED]
    for number, message in sorted(problems):
        print(f"{path}:{number}: {message}")
    print(f"warmed {report.warmed}, failed {report.failed + len(too_long)}, timed out {report.timed_out} "
          f"in {report.elapsed_ms / 1000:.1f} s")
    _print_stats(report.stats)
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `voxpool cache ...`; 0 = done, 1 = some lines not warmed, 2 = usage or server error."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        with _channel(args) as channel:
            stub = tts_pb2_grpc.CacheAdminStub(channel)
            if args.action == "warm":
                return _warm(stub, args)
            stats = stub.GetCacheStats(pb.CacheStatsRequest(), timeout=args.timeout, metadata=_metadata())
    except OSError as exc:
        print(f"voxpool cache: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"voxpool cache: {args.server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(json_format.MessageToDict(stats, preserving_proto_field_name=True,
                                                   always_print_fields_with_no_presence=True), indent=2))
    else:
        _print_stats(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
