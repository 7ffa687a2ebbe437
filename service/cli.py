"""The `voxpool` command: serve, say, voices, normalize, cache, bench."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence


def _cmd_voices(args: argparse.Namespace) -> int:
    from models.voices.install import INSTALLABLE, VoiceInstallError, install_voice
    from models.voices.registry import list_voices

    if args.voices_cmd == "install":
        for name in args.names:
            try:
                path = install_voice(name, force=args.force)
            except VoiceInstallError as exc:
                print(f"voxpool: {exc}", file=sys.stderr)
                return 2
            print(f"{name}: installed at {path}")
        return 0
    installed = {v.name: v for v in list_voices()}
    print(f"{'name':20} {'kind':8} {'rate_hz':>7}  {'status':10} licence / description")
    for name in sorted(set(installed) | set(INSTALLABLE)):
        v = installed.get(name)
        if v is not None:
            print(f"{name:20} {v.kind:8} {v.sample_rate_hz:>7}  {'installed':10} {v.license}")
        else:
            item = INSTALLABLE[name]
            print(f"{name:20} {item.kind:8} {'':>7}  {'available':10} {item.description}")
    return 0


def _cmd_normalize(args: argparse.Namespace) -> int:
    from models.frontend import FrontendError, FrontendOptions, MandarinFrontend

    try:
        frontend = MandarinFrontend(FrontendOptions(lexicon_file=args.lexicon))
        if args.explain:
            explanation = frontend.explain(args.text)
            print(explanation.format())
            return 0 if explanation.error is None else 2
        print(frontend.dry_run(args.text).format())
    except FrontendError as exc:
        print(f"voxpool: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from service.config import ConfigError, load_config
    from service.server import run_server

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"voxpool: {exc}", file=sys.stderr)
        return 2
    from service.telemetry.logs import configure_logging  # telemetry: level and JSON lines from the config

    configure_logging(cfg.telemetry, verbose=args.verbose)
    if args.port is not None:
        cfg.server.port = args.port
    if args.voice is not None:
        cfg.voice.default = args.voice
    return run_server(cfg, backend=args.backend)


def _cmd_say(args: argparse.Namespace) -> int:
    from clients.say import say_main

    return say_main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="voxpool", description="gRPC streaming TTS for IVR gateways")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the gRPC service (installs the default voice on first use)")
    s.add_argument("--config", help="YAML config file (see deploy/config/voxpool.yaml)")
    s.add_argument("--port", type=int, help="gRPC port (default 50051)")
    s.add_argument("--voice", help="default voice name or folder (default baker-zh)")
    s.add_argument("--backend", choices=["engine", "naive", "non_incremental"], default="engine",
                   help="synthesis backend: the pooled engine (default) or a baseline, for side-by-side benchmarks")
    s.set_defaults(func=_cmd_serve)

    s = sub.add_parser("say", help="synthesize text to a WAV file through a running server")
    s.add_argument("text")
    s.add_argument("-o", "--output", required=True, help="WAV file to write")
    s.add_argument("--encoding", choices=["pcmu", "pcma", "l16"], default="l16")
    s.add_argument("--rate", type=int, choices=[8000, 16000, 24000], default=8000)
    s.add_argument("--voice", default="")
    s.add_argument("--stream", action="store_true", help="use Converse with streamed text deltas, paced in real time")
    s.add_argument("--server", default="localhost:50051")
    s.set_defaults(func=_cmd_say)

    s = sub.add_parser("voices", help="list or install voices")
    vs = s.add_subparsers(dest="voices_cmd")
    vi = vs.add_parser("install", help="download, verify and convert a voice into the cache")
    vi.add_argument("names", nargs="+")
    vi.add_argument("--force", action="store_true", help="reinstall even if present")
    vs.add_parser("list", help="installed and installable voices")
    s.set_defaults(func=_cmd_voices, voices_cmd="list")

    s = sub.add_parser("normalize", help="dry run of the frontend: normalized text, pinyin with prosody, ids")
    s.add_argument("text")
    s.add_argument("--explain", action="store_true", help="per character: reading, reading before sandhi, origin")
    s.add_argument("--lexicon", default=None, help="pronunciation lexicon file (grapheme<TAB>pinyin per line)")
    s.set_defaults(func=_cmd_normalize)

    sub.add_parser("cache", help="warm the audio cache from a prompt file, or show its stats (`voxpool cache --help`)")
    sub.add_parser("bench", help="open-loop load generator and benchmark (`voxpool bench --help`; docs/benchmarks.md)")
    sub.add_parser("gateway", help="protocol gateways: `voxpool gateway jambonz` (docs/integrations.md)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if not a.startswith("-")]
    if words and words[0] == "bench":  # the load generator parses its own options (and --help)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from clients.bench import bench_main

        return int(bench_main(argv[argv.index("bench") + 1:]) or 0)
    if words and words[0] == "gateway":  # protocol gateways parse their own options
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from clients.integrations.gateway_cli import main as gateway_main

        return int(gateway_main(argv[argv.index("gateway") + 1:]) or 0)
    if words and words[0] == "cache":  # warm / stats against a running server's admin port
        from clients.cache_cli import main as cache_main

        return cache_main(argv[argv.index("cache") + 1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
