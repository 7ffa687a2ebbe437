"""The `voxpool` command: one table of subcommands, each imported only when it runs."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from protos.voxpool.v1 import wire
from voxpool_cli.args import text_may_start_with_a_dash


@dataclass(frozen=True)
class Subcommand:
    """`run` and `arguments` are "module:function" strings (imported lazily): arguments(parser) adds the options and
    run(args) -> exit code; with `own_parser`, run(argv) parses the rest of the command line itself."""

    name: str
    help: str
    run: str
    arguments: str = ""
    own_parser: bool = False


# add a subcommand here: one row, its functions in the package that owns the work
SUBCOMMANDS = (
    Subcommand("serve", "run the gRPC service (installs the default voice on first use)",
               "service.cli:run", "service.cli:add_arguments"),
    Subcommand("say", "synthesize text to a WAV file through a running server",
               "clients.say:say_main", "voxpool_cli.commands:say_arguments"),
    Subcommand("normalize", "dry run of the frontend: normalized text, pinyin with prosody, ids",
               "voxpool_cli.frontend:run", "voxpool_cli.frontend:add_arguments"),
    Subcommand("voices", "list or install voices", "voxpool_cli.voices:run", "voxpool_cli.voices:add_arguments"),
    Subcommand("cache", "warm the audio cache from a prompt file, or show its stats (`voxpool cache --help`)",
               "clients.cache_cli:main", own_parser=True),
    Subcommand("gateway", "protocol gateways: `voxpool gateway jambonz` (docs/integrations.md)",
               "clients.integrations.gateway_cli:main", own_parser=True),
)
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def say_arguments(s: argparse.ArgumentParser) -> None:
    """The options of `say` (clients.say.say_main reads them)."""
    s.add_argument("text", help="the text to speak (with --ssml: an SSML document, docs/ssml.md); text that starts "
                                "with a dash and no digit goes after `--`: voxpool say -o a.wav -- \"-请稍候\"")
    text_may_start_with_a_dash(s)
    s.add_argument("-o", "--output", required=True, help="WAV file to write")
    s.add_argument("--ssml", action="store_true", help="the text is SSML (<speak>...</speak>)")
    s.add_argument("--rate", dest="speaking_rate", type=_speaking_rate, default=None, metavar="X",
                   help="speaking rate, {}-{} (1.0 = the voice's natural rate)".format(*wire.SPEAKING_RATE_RANGE))
    s.add_argument("--timestamps", action="store_true", help="ask for word timestamps and print them")
    s.add_argument("--encoding", choices=["pcmu", "pcma", "l16"], default="l16")
    s.add_argument("--sample-rate", type=int, choices=wire.SAMPLE_RATES_HZ, default=8000, metavar="HZ",
                   help=f"output sample rate: {wire.sample_rates_text()} (default 8000; G.711 is 8000 only)")
    s.add_argument("--voice", default="")
    s.add_argument("--stream", action="store_true", help="use Converse with streamed text deltas, paced in real time")
    s.add_argument("--server", default="localhost:50051")


def _speaking_rate(text: str) -> float:
    """--rate: a speaking rate within the wire's range (a sample rate there is pointed to --sample-rate)."""
    lo, hi = wire.SPEAKING_RATE_RANGE
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a speaking rate {lo}-{hi}") from None
    if value in wire.SAMPLE_RATES_HZ:
        raise argparse.ArgumentTypeError(f"{text} looks like a sample rate: use --sample-rate {text} (--rate is the "
                                         f"speaking rate, {lo}-{hi})")
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"{text} is out of range; give a speaking rate {lo}-{hi} (1.0 = natural)")
    return value


def _function(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="voxpool", description="gRPC streaming TTS for IVR gateways")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)
    for cmd in SUBCOMMANDS:
        s = sub.add_parser(cmd.name, help=cmd.help)
        if cmd.arguments:
            _function(cmd.arguments)(s)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if not a.startswith("-")]
    own = {c.name: c for c in SUBCOMMANDS if c.own_parser}
    if words and words[0] in own:  # e.g. `voxpool cache` parses its own options (and --help)
        logging.basicConfig(level=logging.INFO, format=_LOG_FORMAT)
        return int(_function(own[words[0]].run)(argv[argv.index(words[0]) + 1:]) or 0)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format=_LOG_FORMAT)
    cmd = next(c for c in SUBCOMMANDS if c.name == args.cmd)
    return int(_function(cmd.run)(args) or 0)
