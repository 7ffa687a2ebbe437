"""`voxpool normalize TEXT`: a dry run of the frontend (normalized text, pinyin with prosody, ids)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")


def run(args: argparse.Namespace) -> int:
    from models.frontend import FrontendError, MandarinFrontend

    try:
        print(MandarinFrontend().dry_run(args.text).format())
    except FrontendError as exc:
        print(f"voxpool: {exc}", file=sys.stderr)
        return 2
    return 0
