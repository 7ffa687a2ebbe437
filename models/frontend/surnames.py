"""Surname readings for say-as name: the polyphonic surnames whose reading as a surname differs from the
character's everyday reading (单 shan4, not dan1), compound surnames first (尉迟 yu4 chi2, while 尉 alone is wei4)."""

from __future__ import annotations

#: Two-character surnames with a special reading.
COMPOUND_SURNAMES: dict[str, tuple[str, str]] = {
    "尉迟": ("yu4", "chi2"), "万俟": ("mo4", "qi2"), "单于": ("chan2", "yu2"), "长孙": ("zhang3", "sun1"),
    "令狐": ("ling2", "hu2"), "澹台": ("tan2", "tai2"),
}
#: One-character surnames read differently from the character's common reading.
SURNAME_READINGS: dict[str, str] = {
    "单": "shan4", "解": "xie4", "仇": "qiu2", "曾": "zeng1", "查": "zha1", "区": "ou1", "朴": "piao2", "繁": "po2",
    "乐": "yue4", "华": "hua4", "任": "ren2", "盖": "ge3", "缪": "miao4", "翟": "zhai2", "覃": "qin2", "种": "chong2",
    "员": "yun4", "召": "shao4", "尉": "wei4", "隗": "wei3", "句": "gou1", "哈": "ha3", "那": "na1", "曲": "qu1",
    "燕": "yan1", "应": "ying1", "薄": "bo2", "秘": "bi4", "折": "she2", "能": "nai4", "过": "guo1",
    "都": "du1", "重": "chong2", "谌": "chen2", "洗": "xian3", "冼": "xian3", "么": "yao1",
}


def surname_reading(name: str) -> tuple[str, ...]:
    """The readings of the surname ``name`` starts with, one per character; () when its usual reading is right."""
    if name[:2] in COMPOUND_SURNAMES:
        return COMPOUND_SURNAMES[name[:2]]
    if name[:1] in SURNAME_READINGS:
        return (SURNAME_READINGS[name[:1]],)
    return ()
