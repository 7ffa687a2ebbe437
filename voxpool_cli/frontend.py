"""`voxpool normalize TEXT`: a dry run of the frontend (normalized text, pinyin with prosody, ids), or --explain."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    from voxpool_cli.args import text_may_start_with_a_dash

    p.add_argument("text", help="the text (one that starts with a dash and no digit goes after `--`)")
    text_may_start_with_a_dash(p)
    p.add_argument("--explain", action="store_true", help="per character: reading, reading before sandhi, origin")
    p.add_argument("--lexicon", default=None, help="pronunciation lexicon file (grapheme<TAB>pinyin per line)")


def run(args: argparse.Namespace) -> int:
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
