"""Argument parsing shared by the `voxpool` subcommands that take caller text."""

from __future__ import annotations

import argparse
import re

# A word that starts with a dash and a digit ("-3℃", "-5%", "-0.5") is text: no option of voxpool looks like that.
_DASH_DIGIT = re.compile(r"^-\d")


def text_may_start_with_a_dash(p: argparse.ArgumentParser) -> None:
    """Let `p`'s text argument start with a dash and a digit. argparse takes any other word with a leading dash for
    an option unless it is a plain number (or holds a space); its negative-number pattern is the one switch it has
    (an attribute set in ArgumentParser.__init__, pinned by tests/service/test_cli_errors.py). Text that starts with
    a dash and no digit goes after `--`."""
    p._negative_number_matcher = _DASH_DIGIT  # noqa: SLF001
