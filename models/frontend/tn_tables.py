"""Lookup tables for Mandarin text normalization: letter names, units, measure words, context keywords, symbols."""

from __future__ import annotations

import re

HANZI_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\U00020000-\U0003134f"
HANZI_RUN_RE = re.compile(f"[{HANZI_CLASS}]+")
HANZI_CHAR_RE = re.compile(f"[{HANZI_CLASS}]")

#: Latin letter → the conventional Mandarin reading written in Hanzi (what call-center agents say when spelling).
LETTER_READINGS: dict[str, str] = {
    "A": "诶", "B": "比", "C": "西", "D": "迪", "E": "伊", "F": "艾弗", "G": "吉", "H": "艾尺", "I": "爱",
    "J": "杰", "K": "开", "L": "艾乐", "M": "艾姆", "N": "恩", "O": "欧", "P": "批", "Q": "丘", "R": "阿尔",
    "S": "艾斯", "T": "踢", "U": "优", "V": "维", "W": "达布溜", "X": "艾克斯", "Y": "歪", "Z": "贼德",
}

#: Latin words with a conventional Mandarin reading (keys lower case, hyphens kept); anything else is spelled.
WORD_READINGS: dict[str, str] = {
    "wifi": "歪飞", "wi-fi": "歪飞", "email": "伊妹儿", "e-mail": "伊妹儿", "iphone": "爱疯", "qq": "扣扣",
}

#: Greek letters sometimes met in text (π, α, Ω ...).
GREEK_READINGS: dict[str, str] = {
    "α": "阿尔法", "β": "贝塔", "γ": "伽马", "δ": "德尔塔", "Δ": "德尔塔", "ε": "艾普西隆", "θ": "西塔",
    "λ": "兰姆达", "μ": "缪", "π": "派", "σ": "西格玛", "Σ": "西格玛", "ω": "欧米伽", "Ω": "欧米伽",
}

#: Units written in Latin letters or symbols after a number → spoken form. Data units read as 字节 words by
#: default; with ``NormalizeOptions.data_units_spelled`` they are spelled ("G B" → 吉比).
LATIN_UNITS: dict[str, str] = {
    "km/h": "公里每小时", "m/s": "米每秒", "MB/s": "兆字节每秒", "KB/s": "千字节每秒", "GB/s": "吉字节每秒",
    "km²": "平方公里", "km2": "平方公里", "m²": "平方米", "m2": "平方米", "㎡": "平方米", "m³": "立方米",
    "m3": "立方米", "cm²": "平方厘米", "kWh": "千瓦时", "kwh": "千瓦时", "kW": "千瓦", "kw": "千瓦",
    "mAh": "毫安时", "Mbps": "兆比特每秒", "Gbps": "吉比特每秒", "kbps": "千比特每秒", "Kbps": "千比特每秒",
    "TB": "太字节", "GB": "吉字节", "MB": "兆字节", "KB": "千字节", "kB": "千字节",
    "kHz": "千赫兹", "MHz": "兆赫兹", "GHz": "吉赫兹", "Hz": "赫兹",
    "km": "公里", "kg": "公斤", "mg": "毫克", "cm": "厘米", "mm": "毫米", "ml": "毫升", "mL": "毫升",
    "ms": "毫秒", "min": "分钟", "m": "米", "g": "克", "L": "升", "s": "秒", "h": "小时", "W": "瓦", "V": "伏",
    "℃": "摄氏度", "°C": "摄氏度", "℉": "华氏度", "°F": "华氏度", "°": "度",
}
DATA_UNITS = frozenset({"TB", "GB", "MB", "KB", "kB"})
TEMPERATURE_UNITS = frozenset({"℃", "°C", "℉", "°F", "°"})
_UNIT_ALTERNATION = "|".join(re.escape(u) for u in sorted(LATIN_UNITS, key=len, reverse=True))
#: A unit right after a number (optional space), not followed by more Latin letters.
LATIN_UNIT_RE = re.compile(rf" ?(?P<unit>{_UNIT_ALTERNATION})(?![A-Za-z])")

#: Currency symbols or codes written before a number → the unit word read after it.
CURRENCY_PREFIXES: dict[str, str] = {
    "￥": "元", "¥": "元", "RMB": "元", "CNY": "元", "US$": "美元", "USD": "美元", "$": "美元", "HK$": "港元",
    "HKD": "港元", "€": "欧元", "EUR": "欧元", "£": "英镑", "GBP": "英镑", "JPY": "日元",
}
CURRENCY_PREFIX_RE = re.compile(
    "(?P<cur>" + "|".join(re.escape(c) for c in sorted(CURRENCY_PREFIXES, key=len, reverse=True)) + ") ?(?=[-−]?[0-9])"
)
#: Currency codes standing alone (not next to a number).
CURRENCY_NAMES: dict[str, str] = {
    "RMB": "人民币", "CNY": "人民币", "USD": "美元", "HKD": "港元", "EUR": "欧元", "GBP": "英镑", "JPY": "日元",
}
#: Currency codes written after a number.
CURRENCY_SUFFIX_RE = re.compile(r" ?(?P<cur>RMB|CNY|USD|HKD|EUR|GBP|JPY)(?![A-Za-z])")
#: Hanzi currency words after a number; 元/块 (the ones with 角/分 or 毛/分) come first.
CURRENCY_WORD_RE = re.compile(
    r"元|块钱|块|人民币|美元|美金|港元|港币|欧元|英镑|日元|韩元|澳元|加元|卢布|台币|角|毛|分钱"
)

#: Measure words and multipliers: a number followed by one of them is a cardinal (125个人, 3000元, 12万).
MEASURE_RE = re.compile(
    r"小时|分钟|公里|公斤|千克|千米|毫升|毫米|厘米|平方|立方|摄氏度|世纪|星期|季度|周年|个月|年级|以上|以下|以内|"
    r"之内|左右|上下|开外|出头|多|余|来|万|千|百|亿|"
    r"[个位名人次天日号月年周岁张条件本台部辆套家间层楼期笔份项种类只头匹瓶杯碗盒包箱袋斤两克吨米里度秒倍成届"
    r"栋座所户页行段章节课道题分点票单趟遍回场轮批粒颗片支根把双对副组群队班排列站路版代级星折元块角毛首封声口顿"
    r"下步门艘架枚滴寸尺丈亩码季室线]"
)
#: After these, a lone 2 reads 两 (两个人, 两天, 两点); 二 stays before 月/日/号/楼/级/路 (二月, 二号, 二楼).
LIANG_RE = re.compile(
    r"小时|分钟|公里|公斤|千克|千米|毫升|毫米|厘米|平方|立方|星期|季度|周年|个月|"
    r"[个位名人次天周岁张条件本台部辆套家间层期笔份项种类只头匹瓶杯碗盒包箱袋斤克吨米里秒倍成栋座所户页行段"
    r"章节课道题分点票单趟遍回场轮批粒颗片支根把双对副组站元块角毛万千百亿首封声口顿下步门艘架枚滴寸尺丈亩年]"
)

_CONNECT = r"(?:号码|号)?[是为:：,， ]{0,3}$"
#: Keywords before a bare number that say how to read it (searched at the end of the preceding text).
LEFT_KEYWORD_RE = re.compile(
    r"(?:(?P<id_card>身份证|证件)|"
    r"(?P<bank_card>银行卡|信用卡|储蓄卡|借记卡|卡号)|"
    r"(?P<code>验证码|校验码|动态码|动态密码|短信码|确认码|取件码|提货码|取货码|密码|口令|激活码|兑换码|邀请码|"
    r"授权码|安全码|识别码|尾号|末尾|后四位|末四位|尾数)|"
    r"(?P<order>订单|单号|工单|工号|编号|账号|帐号|账户|会员|流水号|合同|保单|客户号|户号|序列号|批次|凭证|交易号|"
    r"房间|学号|车次|航班|车牌|型号|ID)|"
    r"(?P<phone>电话|手机|热线|拨打|致电|来电|号码|联系方式|传真|分机|转|座机|客服|呼叫|回拨)|"
    r"(?P<ordinal>第)|"
    r"(?P<cardinal>共计|总共|一共|合计|总计|共|大约|约|超过|不到|仅|只有|剩余|剩下|余额|金额|价格|售价|价值|少于|多于|"
    r"高达|达到|增长|减少|上涨|下降|降低|提高|排名|积分|分数|得分|数量|人数|面积|距离|重量|年龄|消费|支付|付款|"
    r"收费|费用|扣除|扣款|返还|返现|充值|提现|转账|退款|欠款|欠费|还款|应还|已还|额度|限额|优惠|满|减|送|赠送|"
    r"奖励|利息|本金|工资|收入|月薪|年薪|大于|小于|等于|加|乘以|除以))" + _CONNECT
)
LEFT_WINDOW_CHARS = 10

#: Words around M/D that make it a date rather than a fraction (截止11/22, 11/22前).
DATE_LEFT_RE = re.compile(r"(?:日期|截止|截至|到期|于|在|从|自|生日|还款日|账单日|有效期|至|到)[是为:：]?$")
DATE_RIGHT_RE = re.compile(r"(?:之前|以前|之后|以后|前|后|起|到期|截止|当天|至|到|-)")
#: Words before H:MM that make it a score or ratio (比分3:2 → 三比二).
SCORE_LEFT_RE = re.compile(r"(?:比分|比数|比例|比率|比赛|战绩|大比分|赔率|比)[是为:：]?$")

#: Single symbols outside numbers → spoken words (None: silent).
SYMBOL_WORDS: dict[str, str] = {
    "@": "艾特", "&": "和", "+": "加", "=": "等于", "<": "小于", ">": "大于", "×": "乘", "÷": "除以",
    "±": "正负", "°": "度", "%": "百分号", "‰": "千分号", "℃": "摄氏度", "℉": "华氏度", "№": "号", "㎡": "平方米",
    "￥": "元", "¥": "元", "$": "美元", "€": "欧元", "£": "英镑",
}
#: Symbols spelled inside a "characters" span or an email/URL.
SPELL_SYMBOLS: dict[str, str] = {
    "@": "艾特", ".": "点", "-": "杠", "_": "下划线", "/": "斜杠", "#": "井号", "*": "星号", "+": "加",
    ":": "冒号", "&": "和", "=": "等于", "~": "波浪号", "%": "百分号",
}
#: Punctuation → pause mark ("，" clause, "、" short, "。！？" sentence end).
PAUSE_MARKS: dict[str, str] = {
    "，": "，", ",": "，", "；": "，", ";": "，", "：": "，", ":": "，", "、": "、", "。": "。", ".": "。", "！": "！",
    "!": "！", "？": "？", "?": "？", "…": "，", "—": "，", "–": "，", "-": "，", "|": "，", "~": "，", "～": "，",
    "\n": "。", "｡": "。", "､": "、", "﹐": "，", "﹑": "、", "﹒": "。",
}
#: Punctuation dropped without a pause and without a warning (quotes, brackets, name dots).
SILENT_MARKS = frozenset("\"'“”‘’「」『』《》〈〉【】〔〕〖〗()（）[]{}·•`_‘’﹁﹂﹃﹄\t\r ")
#: Per-unit words after "/" (元/月 → 元每月).
PER_RE = re.compile(r"小时|分钟|公里|公斤|[月年天日周次人件个斤秒台位]")

PAUSE_STRENGTH: dict[str, int] = {"、": 1, "，": 2, "。": 3, "！": 3, "？": 3}
