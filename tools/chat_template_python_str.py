#!/usr/bin/python3
"""Stored fixtures: Python's str semantics inside chat templates.

jinja2 maps trim/strip/split()/upper/lower/title/capitalize/wordcount and
the is lower/upper tests onto Python's str, so transformers' renders depend
on Python's notion of whitespace (str.isspace) and on full Unicode case
mapping. This script renders, with Python's jinja2 in transformers'
configuration (tools/chat_template_oracle.py's environment):

* the Llama-3 template (which trims message content) and the Qwen3 one
  (which strips newlines around reasoning) over conversations whose
  messages start and end with each character Python counts as whitespace,
  and with characters it does not (U+200B, U+FEFF, ...);
* small templates applying each str filter and method to such strings and
  to strings with special case mappings ('ß', 'ǆ', final sigma, ...).

It writes tests/data/chat_template_python_str.jsonl (same case format as
the oracle; ASCII JSON, so every special character is a visible \\u escape).
The C++ tests read that file and do not need jinja2. Rerun after changing
the cases:

  /usr/bin/python3 tools/chat_template_python_str.py tests/data/chat_template_python_str.jsonl
"""
import json
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_oracle import chat_context, render  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every code point Python treats as whitespace, computed here rather than
# listed, so the fixture follows the Python that writes it.
WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
# Characters that look blank but are not str.isspace(): must survive a trim.
NOT_WHITESPACE = ["\u200b", "\u180e", "\ufeff", "\u2060", "\u00ad", "\u3164"]

# Qwen3's template strips only '\n' around reasoning (4 KB a case, so a few):
# other whitespace must stay.
QWEN3_EDGE_CHARS = ["\u0085", "\u2028", "\u00a0", "\u3000", "\x1c", "\u200b"]

CASE_STRINGS = [
    "straße", "ß", "ǆemal ǉubljana Ǆ", "ﬁnance ﬂow ﬀ", "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ", "aΣ'b Σ", "ὈΔΥΣΣΕΎΣ",
    "İstanbul ıI", "ŉ ǰ ΐ ᾳ ᾼ", "hello wORLD-foo(bar)[baz]{q}<r>", "a\u2003b\u3000c\u00a0d\u0085e",
    "they're bill's", "1st 2ND 3rd", "éCOLE ÀÉÎÕÜ", "Ⓐⓑ ꭰ Ꭰ", "\U00010428\U00010400 \U0001e922",
    "² ٣ ½ 一 x_y", "", "   ", "ǅ", "ＡＢＣ ａｂｃ",
]

STRIP_CHARS = [("ãxé", "é"), ("éaébé", "é"), ("xx→yy←", "←→x"), ("«¡hola!»", "«»¡!"),
               ("\u00a0 a \u00a0", " "), ("abcba", ""), ("🐉a🐉", "🐉")]

STR_TEMPLATE = ("{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|"
                "{{ s.split()|join('/') }}|{{ s.split()|length }}|{{ s.split(None, 1)|join('/') }}|"
                "{{ s.rsplit(None, 1)|join('/') }}|{{ s|wordcount }}|{{ s.isspace() }}")
CASE_TEMPLATE = ("{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s|upper }}|"
                 "{{ s|lower }}|{{ s|title }}|{{ s|capitalize }}|{{ s.islower() }}|{{ s.isupper() }}|"
                 "{{ s is lower }}|{{ s is upper }}|{{ s.isalpha() }}|{{ s.isdigit() }}|{{ s.isalnum() }}|"
                 "{{ s|wordcount }}|{{ [s, 'b', 'A']|sort|join(',') }}")
CHARS_TEMPLATE = "{{ s.strip(c) }}|{{ s.lstrip(c) }}|{{ s.rstrip(c) }}|{{ s|trim(c) }}"


def char_name(ch):
    return f"U+{ord(ch):04X}"


def template_of(model):
    with open(f"{SOURCE_DIR}/tests/data/tokenizers/{model}/tokenizer_config.json", encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def chat_case(name, template, messages, **extra):
    inputs = {"messages": messages, "add_generation_prompt": True, "bos_token": "<s>",
              "eos_token": "</s>"}
    if extra:
        inputs["extra_context"] = extra
    case = {"name": name, "kind": "chat", "template": template, "inputs": inputs}
    case.update(render(template, chat_context(inputs)))
    return case


def raw_case(name, template, context):
    case = {"name": name, "kind": "raw", "template": template, "context": context}
    case.update(render(template, context))
    return case


def main():
    out_path = sys.argv[1]
    llama3, qwen3 = template_of("llama3"), template_of("qwen3")
    cases = []
    for ch in WHITESPACE + NOT_WHITESPACE:
        tag = char_name(ch)
        cases.append(chat_case(f"llama3_edges_{tag}", llama3, [
            {"role": "system", "content": f"{ch}You are helpful.{ch}"},
            {"role": "user", "content": f"{ch}{ch}Hello{ch}there {ch}"},
            {"role": "assistant", "content": f" {ch}\nHi!\n{ch}"},
            {"role": "user", "content": ch}]))
        if ch in QWEN3_EDGE_CHARS:
            cases.append(chat_case(f"qwen3_edges_{tag}", qwen3, [
                {"role": "user", "content": f"{ch}Hi{ch}"},
                {"role": "assistant", "content": f"<think>\n{ch}why{ch}\n</think>\n\n{ch}Answer{ch}"},
                {"role": "user", "content": f"{ch}More{ch}"}], enable_thinking=True))
        cases.append(raw_case(f"str_{tag}", STR_TEMPLATE, {"s": f"{ch}a{ch}b {ch}{ch}c{ch}"}))
    everything = "".join(WHITESPACE)
    cases.append(chat_case("llama3_all_whitespace", llama3, [
        {"role": "user", "content": f"{everything}Hello{everything}"},
        {"role": "assistant", "content": everything}]))
    cases.append(raw_case("str_all_whitespace", STR_TEMPLATE, {"s": f"{everything}x{everything}y{everything}"}))
    for i, s in enumerate(CASE_STRINGS):
        cases.append(raw_case(f"case_{i}", CASE_TEMPLATE, {"s": s}))
    for i, (s, c) in enumerate(STRIP_CHARS):
        cases.append(raw_case(f"strip_chars_{i}", CHARS_TEMPLATE, {"s": s, "c": c}))
    with open(out_path, "w", encoding="ascii") as out:
        for case in cases:
            out.write(json.dumps(case, ensure_ascii=True) + "\n")
    errors = sum("error" in c for c in cases)
    print(f"wrote {len(cases)} cases ({errors} expected errors; {len(WHITESPACE)} whitespace characters, "
          f"Unicode {unicodedata.unidata_version}) to {out_path}")


if __name__ == "__main__":
    main()
