#!/usr/bin/python3
"""Expected chat-template renders from Python's jinja2 (Debian python3-jinja2).

Renders the real chat templates in tests/data/tokenizers and a set of
feature templates over many generated conversations, in the environment
transformers' apply_chat_template uses (immutable sandbox, trim_blocks,
lstrip_blocks, loop controls, its tojson, raise_exception, {% generation %}),
and writes one JSON case per line for the C++ tests to compare against:

  {"name", "kind": "chat", "template", "inputs": {...}, "expected" | "error"}
  {"name", "kind": "raw", "template", "context": {...}, "expected" | "error"}

Usage: chat_template_oracle.py SOURCE_DIR OUT_FILE
"""
import json
import random
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.If(nodes.Const(True), body, [], [], lineno=lineno)


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


ENV = make_env()


def render(template, context):
    try:
        return {"expected": ENV.from_string(template).render(**context)}
    except (TemplateError, jinja2.TemplateError, TypeError, ValueError, KeyError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def chat_context(inputs):
    """The variables apply_chat_template passes (tools is None when absent)."""
    ctx = {
        "messages": inputs["messages"],
        "tools": inputs.get("tools"),
        "add_generation_prompt": inputs["add_generation_prompt"],
        "bos_token": inputs["bos_token"],
        "eos_token": inputs["eos_token"],
    }
    ctx.update(inputs.get("extra_context", {}))
    return ctx


# ---- Generated conversations ----------------------------------------------

TEXTS = [
    "Hello!", "What is 2 + 2?", "Tell me a story about a dragon.", "  leading and trailing spaces  ",
    "line one\nline two\n\nline four", "Quotes: 'single' and \"double\" and \\backslash",
    "日本語のテキストと中文", "emoji 🐉🔥 and accents: café, naïve", "tabs\tand\tmore", "",
    "<tool_response>\n{\"temp\": 21}\n</tool_response>", "code: `for i in range(3): print(i)`",
    "{{ not a template }} {% neither %}", "<think>", "ends with newline\n",
]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": {"type": "object",
                                                     "properties": {"city": {"type": "string", "description": "City name"},
                                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search — ünïcode ✓",
                                      "parameters": {"type": "object",
                                                     "properties": {"query": {"type": "string"},
                                                                    "limit": {"type": "integer", "default": 5},
                                                                    "exact": {"type": "boolean"},
                                                                    "ratio": {"type": "number", "default": 0.5}}}}},
]


def text(rng):
    return rng.choice(TEXTS)


def assistant_message(rng):
    m = {"role": "assistant"}
    kind = rng.randrange(5)
    if kind == 0:
        m["content"] = text(rng)
    elif kind == 1:
        m["content"] = "<think>\nreasoning " + text(rng) + "\n</think>\n\n" + text(rng)
    elif kind == 2:
        m["content"] = text(rng)
        m["reasoning_content"] = "I should " + text(rng)
    else:
        m["content"] = text(rng) if rng.random() < 0.5 else ""
        calls = []
        for _ in range(rng.randint(1, 2)):
            args = {"city": rng.choice(["Paris", "東京", "New \"York\""]), "days": rng.randint(1, 9)}
            call = {"name": rng.choice(["get_weather", "search"]),
                    "arguments": json.dumps(args) if kind == 3 else args}
            calls.append({"type": "function", "function": call} if rng.random() < 0.8 else call)
        m["tool_calls"] = calls
    return m


def conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng)})
    for _ in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": text(rng)})
        if rng.random() < 0.8:
            a = assistant_message(rng)
            msgs.append(a)
            if "tool_calls" in a:
                for _ in a["tool_calls"]:
                    msgs.append({"role": "tool", "content": text(rng)})
                if rng.random() < 0.7:
                    msgs.append({"role": "assistant", "content": text(rng)})
    if rng.random() < 0.3 and msgs[-1]["role"] != "assistant":
        msgs.append(assistant_message(rng))
    return msgs


def chat_inputs(rng):
    inputs = {"messages": conversation(rng), "add_generation_prompt": rng.random() < 0.7,
              "bos_token": "<s>", "eos_token": "</s>"}
    if rng.random() < 0.3:
        inputs["tools"] = TOOLS[: rng.randint(1, 2)]
    choice = rng.randrange(3)
    if choice:
        inputs["extra_context"] = {"enable_thinking": choice == 1}
    return inputs


# ---- Feature templates (each exercised with one fixed context) --------------

FEATURES = [
    ("slicing", "{{ xs[1:] }}|{{ xs[::-1] }}|{{ xs[-2:] }}|{{ s[2:5] }}|{{ s[::-2] }}|{{ xs[:-1] }}|{{ s[-1] }}"),
    ("string_methods", "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }} {{ s.strip('ab') }} "
                       "{{ s.replace('a', 'X') }} {{ s.split('a') }} {{ s.rsplit('a', 1) }} {{ s.split() }} "
                       "{{ s.startswith('ab') }} {{ s.endswith(('z', 'd')) }} {{ s.find('c') }} {{ s.count('a') }}"),
    ("filters", "{{ xs|length }} {{ xs|join(', ') }} {{ xs|first }} {{ xs|last }} {{ xs|reverse|list }} "
                "{{ xs|sort }} {{ xs|unique|list }} {{ xs|max }} {{ xs|min }} {{ s|trim }} {{ s|upper }} "
                "{{ missing|default('dflt') }} {{ ''|default('e', true) }} {{ n|abs }} {{ 2.567|round(2) }} "
                "{{ '42'|int + 1 }} {{ '1.5'|float }} {{ s|replace('a', '_') }} {{ 'x'|string }} {{ s|wordcount }}"),
    ("tojson", "{{ d|tojson }}\n{{ d|tojson(indent=2) }}\n{{ xs|tojson }}\n{{ 'é\"\\n'|tojson }}\n{{ d|tojson(indent=0) }}"),
    ("namespace_loop", "{% set ns = namespace(total=0, names=[]) %}{% for m in ms %}{% set ns.total = ns.total + m.n %}"
                       "{% set ns.names = ns.names + [m.name] %}{% endfor %}{{ ns.total }} {{ ns.names }}"),
    ("loop_vars", "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{% if loop.first %}F{% endif %}"
                  "{% if loop.last %}L{% endif %}{{ loop.revindex0 }}{{ loop.previtem if not loop.first }},{% endfor %}"),
    ("loop_filter_else", "{% for x in xs if x > 2 %}{{ x }}{{ loop.index }} {% else %}none{% endfor %}|"
                         "{% for x in [] %}x{% else %}empty{% endfor %}"),
    ("break_continue", "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("dict_iteration", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"
                       "{{ d.keys()|list }}{{ d['a'] }}{{ d.b }}{{ d.get('zz', 'none') }}"
                       "{% for k, v in d|items %}{{ k }}:{{ v|tojson }}{% endfor %}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} "
              "{{ greet(name='C', punct='.') }}"),
    ("set_block", "{% set body %}[{{ s }}]{% endset %}{{ body ~ body }}"),
    ("tests", "{{ n is number }} {{ s is string }} {{ d is mapping }} {{ xs is iterable }} {{ none is none }} "
              "{{ missing is defined }} {{ n is odd }} {{ n is even }} {{ 4 is divisibleby 2 }} {{ true is true }} "
              "{{ n is integer }} {{ 1.5 is float }} {{ 'ab' is lower }} {{ s is not none }} {{ 3 is equalto 3 }}"),
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} "
                   "{{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1.5 + 1 }} {{ 10 - 2.5 }} {{ n * -1 }}"),
    ("comparisons", "{{ 1 < 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 2 in xs }} {{ 9 not in xs }} "
                    "{{ 'a' in d }} {{ 1 != 2 and 3 >= 3 or false }} {{ not true }} {{ xs == [3, 1, 2, 3, 4] }}"),
    ("ternary_concat", "{{ 'yes' if n > 0 else 'no' }} {{ s ~ n ~ none }} {{ 'x' if false }}|{{ (xs|length) ~ '' }}"),
    ("whitespace_control", "a  {%- if true -%}  b  {%- endif -%}  c\n  {% if true %}\n  d\n  {% endif %}\n{# comment #}\n  e  {{- ' f ' -}}  g\n"),
    ("selectattr_map", "{{ ms|selectattr('n', 'gt', 1)|map(attribute='name')|join(',') }} "
                       "{{ ms|rejectattr('name', 'equalto', 'b')|map(attribute='n')|list }} {{ ms|map(attribute='name')|list }} "
                       "{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ ms|selectattr('flag')|list|length }} "
                       "{{ ms|sum(attribute='n') }} {{ xs|sum }} {{ ms|sort(attribute='n', reverse=true)|map(attribute='name')|join }}"),
    ("range_dict", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ {'k': [1, 2]} }}"),
    ("printing", "{{ none }} {{ true }} {{ 1.0 }} {{ 0.1 }} {{ 1e20 }} {{ xs }} {{ d }} {{ ['a', \"b'c\"] }} {{ 3.14159 }}"),
    ("indent_format", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ '%s=%d'|format('k', 3) }}"),
    ("raise", "{% if xs|length > 2 %}{{ raise_exception('too many: ' ~ xs|length) }}{% endif %}ok"),
    ("string_loop_nested", "{% for c in 'héllo' %}{{ c }}.{% endfor %}{% for row in [[1, 2], [3]] %}{% for v in row %}"
                           "{{ loop.index }}{{ v }}{% endfor %};{% endfor %}"),
    ("generation_tag", "{% for m in ms %}{% generation %}<{{ m.name }}>{% endgeneration %}{% endfor %}"),
]

FEATURE_CONTEXT = {
    "xs": [3, 1, 2, 3, 4], "s": "abcad bad", "n": 7,
    "d": {"b": 2, "a": "x", "nested": {"k": [1, None, True, 1.5, "é"]}},
    "ms": [{"name": "a", "n": 1, "flag": True}, {"name": "b", "n": 2}, {"name": "c", "n": 3, "flag": False}],
}


def main():
    source_dir, out_path = sys.argv[1], sys.argv[2]
    rng = random.Random(1234)
    cases = []
    for model, count in (("qwen3", 150), ("llama3", 40)):
        with open(f"{source_dir}/tests/data/tokenizers/{model}/tokenizer_config.json", encoding="utf-8") as f:
            template = json.load(f)["chat_template"]
        for i in range(count):
            inputs = chat_inputs(rng)
            case = {"name": f"{model}_{i}", "kind": "chat", "template": template, "inputs": inputs}
            case.update(render(template, chat_context(inputs)))
            cases.append(case)
    for name, template in FEATURES:
        case = {"name": name, "kind": "raw", "template": template, "context": FEATURE_CONTEXT}
        case.update(render(template, FEATURE_CONTEXT))
        cases.append(case)
    with open(out_path, "w", encoding="utf-8") as out:
        for case in cases:
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    errors = sum("error" in c for c in cases)
    print(f"wrote {len(cases)} cases ({errors} expected errors) to {out_path}")


if __name__ == "__main__":
    main()
