"""LLM.chat and the tokenizer's apply_chat_template on a tiny random Qwen3
with the real Qwen3 template: the rendered text equals Python jinja2's
render (tools/chat_template_oracle.py, transformers' environment) and the
prompt ids equal what `pagoda serve` makes of the same conversation
(/tokenize, the chat endpoint's own prompt function)."""

import json
import re
import subprocess
import urllib.request

import pytest

from pagoda import LLM, SamplingParams
from conftest import BINARY
import chat_template_oracle

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello, world"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def qwen3_llm(qwen3_dir):
    return LLM(qwen3_dir, max_model_len=512, threads=1)


@pytest.fixture(scope="module")
def server(qwen3_dir):
    proc = subprocess.Popen([BINARY, "serve", "--model", qwen3_dir, "--port", "0",
                             "--max-model-len", "512", "--threads", "1"],
                            stderr=subprocess.PIPE, text=True)
    log = ""
    for line in proc.stderr:
        log += line
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if m:
            break
    else:
        raise AssertionError("server did not start: " + log)
    yield m.group(1)
    proc.terminate()
    proc.wait(30)


def server_tokenize(url, **body):
    req = urllib.request.Request(url + "/tokenize", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["tokens"]


def oracle(tok, messages, add_generation_prompt, **extra):
    joined = [dict(m, content=m["content"] if isinstance(m["content"], str)
                   else "".join(p["text"] for p in m["content"])) for m in messages]
    context = {"messages": joined, "add_generation_prompt": add_generation_prompt,
               "bos_token": tok.bos_token or "", "eos_token": tok.eos_token or "", **extra}
    r = chat_template_oracle.render(tok.chat_template, context)
    assert "expected" in r, r
    return r["expected"]


@pytest.mark.parametrize("kwargs", [{}, {"chat_template_kwargs": {"enable_thinking": False}},
                                    {"tools": TOOLS}])
def test_chat_prompt_equals_server_and_jinja(qwen3_llm, server, kwargs):
    out = qwen3_llm.chat(CONVERSATION, SamplingParams(temperature=0, max_tokens=4),
                         use_tqdm=False, **kwargs)[0]
    tok = qwen3_llm.get_tokenizer()
    extra = dict(kwargs.get("chat_template_kwargs", {}))
    if "tools" in kwargs:
        extra["tools"] = kwargs["tools"]
    assert out.prompt == oracle(tok, CONVERSATION, True, **extra)
    assert out.prompt_token_ids == server_tokenize(server, messages=CONVERSATION, **kwargs)
    assert len(out.outputs[0].token_ids) == 4


def test_apply_chat_template(qwen3_llm, server):
    tok = qwen3_llm.get_tokenizer()
    text = tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert text == oracle(tok, CONVERSATION, True)
    ids = tok.apply_chat_template(CONVERSATION, add_generation_prompt=False)
    assert ids == server_tokenize(server, messages=CONVERSATION, add_generation_prompt=False)
    assert tok.decode(ids, skip_special_tokens=False) == oracle(tok, CONVERSATION, False)


def test_several_conversations_and_errors(qwen3_llm):
    a = [{"role": "user", "content": "Hello, world"}]
    b = [{"role": "user", "content": "Bye"}]
    outs = qwen3_llm.chat([a, b], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert [o.prompt for o in outs] == [qwen3_llm.chat(c, SamplingParams(max_tokens=1), use_tqdm=False)[0].prompt
                                        for c in (a, b)]
    with pytest.raises(ValueError, match="every message needs a string role"):
        qwen3_llm.chat([{"content": "no role"}], use_tqdm=False)
    with pytest.raises(ValueError, match="cannot both be true"):
        qwen3_llm.chat(a, continue_final_message=True, use_tqdm=False)
    with pytest.raises(ValueError, match="chat template"):
        qwen3_llm.chat(a, chat_template="{% if %}", use_tqdm=False)
