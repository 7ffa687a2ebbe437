"""BCP-47 language tags, compared the way a gateway means them: case-insensitive, `cmn` (Mandarin) the same as `zh`."""

from __future__ import annotations

# macrolanguage members that name the same spoken language as the macrolanguage for our voices
_SAME_AS = {"cmn": "zh"}


def _parts(tag: str) -> tuple[str, str, str]:
    """(language, script, region) of a tag, lowercased; 'zh-cmn-Hans-CN' (extlang form) → ('zh', 'hans', 'cn')."""
    subtags = [p for p in tag.replace("_", "-").lower().split("-") if p]
    if not subtags:
        return "", "", ""
    language, rest = subtags[0], subtags[1:]
    if rest and len(rest[0]) == 3 and rest[0].isalpha():  # an extended language subtag: zh-cmn
        language, rest = rest[0], rest[1:]
    language = _SAME_AS.get(language, language)
    script = next((p for p in rest[:1] if len(p) == 4 and p.isalpha()), "")
    rest = rest[1:] if script else rest
    region = next((p for p in rest[:1] if (len(p) == 2 and p.isalpha()) or (len(p) == 3 and p.isdigit())), "")
    return language, script, region


def matches(wanted: str, tag: str) -> bool:
    """True when `tag` (a voice's language) is the language `wanted` asks for: the same language, and the same
    script and region wherever both name one ('cmn' and 'cmn-CN' match 'zh-CN'; 'zh-TW' does not match 'zh-CN')."""
    want, have = _parts(wanted), _parts(tag)
    if not want[0] or want[0] != have[0]:
        return False
    return all(not w or not h or w == h for w, h in zip(want[1:], have[1:]))
