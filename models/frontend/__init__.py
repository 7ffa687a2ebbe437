"""Mandarin text frontend for the Baker voice: normalization, G2P, sandhi, prosody marks, symbol ids, segmenting."""

from .explain import CharReading, Explanation
from .g2p import LexiconError
from .lexicon_file import LexiconFileError, LexiconStore, load_lexicon_file
from .normalize import NormalizationError, NormalizedText, NormalizeOptions, Span, normalize
from .pipeline import DryRun, FrontendError, FrontendLexiconError, FrontendOptions, FrontendResult, MandarinFrontend
from .segmenter import Segment, Segmenter, SegmenterError
from .symbols import EOS_ID, ID_TO_SYMBOL, SIL_ID, SYMBOL_TO_ID, SYMBOLS, PinyinError

__all__ = [
    "CharReading",
    "Explanation",
    "LexiconFileError",
    "LexiconStore",
    "load_lexicon_file",
    "DryRun",
    "EOS_ID",
    "FrontendError",
    "FrontendLexiconError",
    "FrontendOptions",
    "FrontendResult",
    "ID_TO_SYMBOL",
    "LexiconError",
    "MandarinFrontend",
    "NormalizationError",
    "NormalizeOptions",
    "NormalizedText",
    "PinyinError",
    "SIL_ID",
    "SYMBOLS",
    "SYMBOL_TO_ID",
    "Segment",
    "Segmenter",
    "SegmenterError",
    "Span",
    "normalize",
]
