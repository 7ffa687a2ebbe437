"""SSML turns: a safe, incremental W3C SSML 1.1 subset parser mapped onto the frontend's spans, cuts and marks."""

from service.ssml.model import (
    Cut,
    Event,
    MarkAt,
    Phoneme,
    ProsodyAt,
    SsmlDocument,
    SsmlError,
    SsmlLimits,
    SsmlWarning,
    TextPiece,
)
from service.ssml.parser import SSML_NS, SsmlStream, parse_ssml
from service.ssml.turn_text import Pause, SsmlSegment, SsmlTurnText

__all__ = [
    "Cut",
    "Event",
    "MarkAt",
    "Phoneme",
    "ProsodyAt",
    "SSML_NS",
    "Pause",
    "SsmlDocument",
    "SsmlError",
    "SsmlLimits",
    "SsmlSegment",
    "SsmlStream",
    "SsmlTurnText",
    "SsmlWarning",
    "TextPiece",
    "parse_ssml",
]
