"""`voxpool voices [list | install NAME...]`: installed and installable voices."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    vs = p.add_subparsers(dest="voices_cmd")
    vi = vs.add_parser("install", help="download, verify and convert a voice into the cache")
    vi.add_argument("names", nargs="+")
    vi.add_argument("--force", action="store_true", help="reinstall even if present")
    vs.add_parser("list", help="installed and installable voices")
    p.set_defaults(voices_cmd="list")


def run(args: argparse.Namespace) -> int:
    from models.voices.install import INSTALLABLE, VoiceInstallError, install_voice
    from models.voices.registry import invalid_voice_folders, list_voices

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
    for path, why in invalid_voice_folders():  # docs/voices.md: `voices list` validates each folder
        print(f"{path.name:20} {'':8} {'':>7}  {'invalid':10} {why}")
    return 0
