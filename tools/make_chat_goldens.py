#!/usr/bin/env python3
"""Golden renderings of chat templates by Python's Jinja2, for kvad's C++ Jinja engine to match.

Renders every template in tests/fixtures/chat_templates/ over a set of conversations exactly as
transformers' apply_chat_template does (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension, the {% generation %} tag, raise_exception,
strftime_now, and transformers' tojson), plus a list of engine feature snippets, and writes

  tests/fixtures/chat_goldens/<template>.json   {"template", "now", "cases": [{name, messages,
                                                 kwargs, expected | error, expected_sorted?}]}
  tests/fixtures/chat_goldens/jinja_features.json  [{name, template, vars, expected | error}]

strftime_now is pinned to NOW so the goldens are deterministic; the C++ side gets the same date
through ChatTemplate's extra["__kvad_now"].

`expected_sorted` is present when the rendering changes if every JSON object's keys are sorted:
that is what the C++ ChatTemplate sees today, because kvad::Json (nlohmann::json) keeps object
keys sorted rather than in insertion order.

Usage: python3 tools/make_chat_goldens.py   (needs only jinja2; run from anywhere)
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_goldens")
NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)
NOW_STR = NOW.strftime("%Y-%m-%dT%H:%M:%S")


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def sort_keys(v):
    if isinstance(v, dict):
        return {k: sort_keys(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [sort_keys(x) for x in v]
    return v


def render(source, messages, kwargs):
    """apply_chat_template's render call: tools/documents default to None."""
    kw = dict(kwargs)
    agp = kw.pop("add_generation_prompt", False)
    tools = kw.pop("tools", None)
    documents = kw.pop("documents", None)
    tpl = ENV.from_string(source)
    return tpl.render(messages=messages, tools=tools, documents=documents, add_generation_prompt=agp, **kw)


def case(name, messages, **kwargs):
    return {"name": name, "messages": messages, "kwargs": kwargs}


# ---- conversations ----

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello, how are you?"}
A1 = {"role": "assistant", "content": "I'm doing great. How can I help you today?"}
U2 = {"role": "user", "content": "Tell me a joke about \"quotes\" and 'apostrophes'."}
UNICODE = {
    "role": "user",
    "content": "Grüße aus Köln 👋 — 你好，世界！\nLine two\twith a tab, a backslash \\ and \"quotes\".\n\n  trailing spaces  \n",
}
A_UNICODE = {"role": "assistant", "content": "  Ça va ✓ — ¿qué tal? 🎉  "}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a word: ünïcödé, 漢字 and \"quotes\"",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer", "default": 3, "minimum": 0.5}}},
        },
    },
]
U_WEATHER = {"role": "user", "content": "What's the weather like in Paris?"}
A_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"type": "function", "function": {"name": "get_current_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}
    ],
}
A_CALL_NONE = dict(A_CALL, content=None)
A_CALL2 = {
    "role": "assistant",
    "content": "Let me check both.",
    "tool_calls": [
        {"type": "function", "function": {"name": "get_current_weather", "arguments": {"location": "Paris"}}},
        {"type": "function", "function": {"name": "lookup", "arguments": {"q": "météo", "n": 2}}},
    ],
}
T_RESULT = {"role": "tool", "content": "{\"temperature\": 22, \"condition\": \"sunny\"}"}
T_RESULT2 = {"role": "tool", "content": "météo: weather"}
A_FINAL = {"role": "assistant", "content": "It is 22°C and sunny in Paris."}

BASIC = [
    case("system_user_gen", [SYS, U1], add_generation_prompt=True),
    case("system_user_nogen", [SYS, U1], add_generation_prompt=False),
    case("multi_turn_gen", [SYS, U1, A1, U2], add_generation_prompt=True),
    case("multi_turn_nogen", [SYS, U1, A1, U2, A1], add_generation_prompt=False),
    case("no_system", [U1, A1, U2], add_generation_prompt=True),
    case("unicode_newlines_quotes", [SYS, UNICODE, A_UNICODE, U2], add_generation_prompt=True),
    case("single_user", [U1], add_generation_prompt=False),
]

TOOL_CASES = [
    case("tools_first_turn", [SYS, U_WEATHER], add_generation_prompt=True, tools=TOOLS),
    case("tools_no_system", [U_WEATHER], add_generation_prompt=True, tools=TOOLS),
    case("tool_call_roundtrip", [SYS, U_WEATHER, A_CALL, T_RESULT, A_FINAL], add_generation_prompt=False, tools=TOOLS),
    case("tool_call_pending", [U_WEATHER, A_CALL, T_RESULT], add_generation_prompt=True, tools=TOOLS),
]

QWEN_EXTRA = [
    case("two_tool_calls_two_results", [SYS, U_WEATHER, A_CALL2, T_RESULT, T_RESULT2, A_FINAL], add_generation_prompt=True, tools=TOOLS),
    case("tool_call_content_none", [U_WEATHER, A_CALL_NONE, T_RESULT], add_generation_prompt=True, tools=TOOLS),
]

QWEN3_EXTRA = [
    case("reasoning_content_last", [U1, {"role": "assistant", "content": "Fine, thanks!", "reasoning_content": "The user greets me.\nI should answer."}], add_generation_prompt=False),
    case("think_in_content", [SYS, U1, {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nFine, thanks!"}, U2], add_generation_prompt=True),
    case("think_in_content_last", [U1, {"role": "assistant", "content": "<think>\nHmm.\n\n</think>\n\nFine!"}], add_generation_prompt=False),
    case("enable_thinking_false", [U1], add_generation_prompt=True, enable_thinking=False),
    case("enable_thinking_true", [U1], add_generation_prompt=True, enable_thinking=True),
    case("multi_step_tool", [U_WEATHER, dict(A_CALL, reasoning_content="Need the weather tool."), T_RESULT, {"role": "user", "content": "<tool_response>\nextra\n</tool_response>"}], add_generation_prompt=True, tools=TOOLS),
    case("tool_args_as_string", [U_WEATHER, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]}, T_RESULT], add_generation_prompt=True, tools=TOOLS),
    case("reasoning_none", [U1, {"role": "assistant", "content": "<think>a</think>b", "reasoning_content": None}, U2], add_generation_prompt=True),
]

LLAMA31_EXTRA = [
    case("date_string_given", [SYS, U1], add_generation_prompt=True, date_string="01 Jan 2030"),
    case("tools_in_system", [SYS, U_WEATHER], add_generation_prompt=True, tools=TOOLS, tools_in_user_message=False),
    case("builtin_tools", [SYS, U_WEATHER, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "brave_search", "arguments": {"query": "Paris weather", "lang": "fr"}}}]}, {"role": "ipython", "content": {"result": "sunny"}}], add_generation_prompt=True, builtin_tools=["brave_search", "code_interpreter", "wolfram_alpha"]),
    case("custom_tools", [U_WEATHER], add_generation_prompt=True, custom_tools=TOOLS),
    case("tool_message_list_content", [U_WEATHER, A_CALL, {"role": "tool", "content": [{"type": "text", "text": "22C"}]}], add_generation_prompt=True, tools=TOOLS),
    case("error_two_tool_calls", [U_WEATHER, A_CALL2], add_generation_prompt=True, tools=TOOLS, tools_in_user_message=False),
    case("error_tools_without_user", [SYS], add_generation_prompt=True, tools=TOOLS),
]

LLAMA32_EXTRA = [
    case("strftime_date", [U1], add_generation_prompt=True),
    case("date_string_given", [SYS, U1], add_generation_prompt=True, date_string="01 Jan 2030"),
    case("tools_in_system", [SYS, U_WEATHER], add_generation_prompt=True, tools=TOOLS, tools_in_user_message=False),
    case("error_two_tool_calls", [U_WEATHER, A_CALL2], add_generation_prompt=True, tools=TOOLS, tools_in_user_message=False),
]

DEEPSEEK_EXTRA = [
    case("two_systems", [SYS, {"role": "system", "content": "Be brief."}, U1], add_generation_prompt=True),
    case("think_stripped", [U1, {"role": "assistant", "content": "<think>hidden</think>Visible answer"}, U2], add_generation_prompt=True),
    case("tool_calls", [U_WEATHER, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Paris\"}"}}, {"type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]}, T_RESULT, T_RESULT2, A_FINAL], add_generation_prompt=True),
    case("tool_pending", [U_WEATHER, {"role": "assistant", "content": "Checking.", "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}, T_RESULT], add_generation_prompt=True),
]

# DeepSeek-V3's own template (tests/fixtures/tokenizers/deepseek_v3): tool calls only when the
# content is none (their arguments are strings it concatenates), the calls-end marker after each
# call past the first, tool outputs joined by newlines, <think> kept in the history.
DEEPSEEK_V3_EXTRA = [
    case("two_systems", [SYS, {"role": "system", "content": "Be brief."}, U1], add_generation_prompt=True),
    case("think_kept", [U1, {"role": "assistant", "content": "<think>hidden</think>Visible answer"}, U2], add_generation_prompt=True),
    case("one_tool_call", [U_WEATHER, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Paris\"}"}}]}, T_RESULT, A_FINAL], add_generation_prompt=True),
    case("two_tool_calls_two_results", [U_WEATHER, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Paris\"}"}}, {"type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"météo\"}"}}]}, T_RESULT, T_RESULT2], add_generation_prompt=True),
    case("tool_result_then_user", [U_WEATHER, {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}, T_RESULT, U2], add_generation_prompt=True),
    case("error_tool_args_not_string", [U_WEATHER, A_CALL_NONE, T_RESULT], add_generation_prompt=True),
]

MISTRAL_EXTRA = [
    case("error_roles_not_alternating", [U1, U2], add_generation_prompt=False),
    case("error_system_role", [SYS, U1], add_generation_prompt=False),
]

TEMPLATE_CASES = {
    "qwen2.5-7b-instruct.jinja": BASIC + TOOL_CASES + QWEN_EXTRA,
    "qwen3.jinja": BASIC + TOOL_CASES + QWEN_EXTRA + QWEN3_EXTRA,
    "llama-3-instruct.jinja": BASIC,
    "llama-3.1-8b-instruct.jinja": BASIC + TOOL_CASES + LLAMA31_EXTRA,
    "llama-3.2-1b-instruct.jinja": BASIC + TOOL_CASES + LLAMA32_EXTRA,
    "smollm2-1.7b-instruct.jinja": BASIC,
    "deepseek-r1.jinja": BASIC + DEEPSEEK_EXTRA,
    "deepseek-v3.jinja": BASIC + DEEPSEEK_V3_EXTRA,
    "zephyr-7b-beta.jinja": BASIC,
    "mistral-7b-instruct-v0.1.jinja": [c for c in BASIC if c["messages"][0]["role"] != "system"] + MISTRAL_EXTRA,
    "deepseek-coder-33b-instruct.jinja": BASIC,
    "falcon-rw-1b-chat.jinja": BASIC,
    "pivot-moe.jinja": BASIC,
    "gpt2-simple.jinja": BASIC,
    "chatml-default.jinja": BASIC,
}

SPECIAL_TOKENS = {
    "qwen": ("", "<|im_end|>"),
    "llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "default": ("<s>", "</s>"),
}


def tokens_for(name):
    for key in ("qwen", "llama", "deepseek"):
        if key in name:
            return SPECIAL_TOKENS[key]
    return SPECIAL_TOKENS["default"]


def run_template_cases():
    for fname, cases in TEMPLATE_CASES.items():
        with open(os.path.join(TEMPLATES, fname), encoding="utf-8") as f:
            source = f.read()
        bos, eos = tokens_for(fname)
        out_cases = []
        for c in cases:
            kwargs = {"bos_token": bos, "eos_token": eos, **c["kwargs"]}
            rec = {"name": c["name"], "messages": c["messages"], "kwargs": kwargs}
            try:
                rec["expected"] = render(source, c["messages"], kwargs)
                sorted_out = render(source, sort_keys(c["messages"]), sort_keys(kwargs))
                if sorted_out != rec["expected"]:
                    rec["expected_sorted"] = sorted_out
            except Exception as e:  # raise_exception, or a TypeError the template runs into
                rec["error"] = f"{type(e).__name__}: {e}"
            out_cases.append(rec)
        path = os.path.join(OUT, fname.replace(".jinja", ".json"))
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"template": fname, "now": NOW_STR, "cases": out_cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{path}: {len(out_cases)} cases")


# ---- engine features: (name, template, vars) ----

MSGS = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]

FEATURES = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("ws_plain", "a\n{% if true %}\nb\n{% endif %}\nc\n", {}),
    ("ws_indented_blocks", "<ul>\n    {% for x in [1,2] %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>", {}),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("ws_var_minus", "a \n {{- 'x' -}} \n b", {}),
    ("ws_plus", "a\n    {%+ if true %}b{% endif %}\n", {}),
    ("ws_plus_end", "{% if true +%}\nb{% endif +%}\nc", {}),
    ("ws_comment", "a\n  {# comment #}\nb\n{#- c2 -#}  \n c", {}),
    ("ws_comment_plus", "x\n  {#+ c #}\ny", {}),
    ("ws_var_no_trim", "{{ 'a' }}\nb", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", {}),
    ("ws_trailing_newline_dropped", "abc\n", {}),
    ("ws_two_trailing_newlines", "abc\n\n", {}),
    ("ws_tabs_lstrip", "x\n\t \t{% if true %}y{% endif %}", {}),
    ("ws_text_before_tag_same_line", "x  {% if true %}y{% endif %}", {}),
    ("ws_start_of_template", "   {% if true %}y{% endif %}", {}),
    ("ws_after_minus_var_then_block", "{{ 'a' -}}\n   {% if true %}b{% endif %}", {}),
    ("ws_unicode_space_minus", "a\u00a0\u3000{%- if true %}b{% endif %}", {}),
    ("raw_block", "{% raw %}{{ not parsed }} {% if %}{% endraw %}", {}),
    ("raw_block_ws", "a\n  {%- raw -%}  x {{ y }}  {%- endraw -%}  \nb", {}),
    ("raw_block_lines", "a\n{% raw %}\n{{ x }}\n{% endraw %}\nb", {}),
    # literals and printing
    ("print_values", "{{ 1 }}|{{ -2 }}|{{ 1.5 }}|{{ 1e16 }}|{{ 1.0e-5 }}|{{ 0.1 + 0.2 }}|{{ 10 / 4 }}|{{ 10 / 5 }}|{{ true }}|{{ none }}|{{ 'x' }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 2.5] }}|{{ {'a': 1, 'b': [1, 2]} }}|{{ (1,) }}|{{ () }}|{{ (1, 'x') }}|{{ [] }}|{{ {} }}", {}),
    ("print_string_repr", "{{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'tab\\tnl\\n', 'uni é 😀', '\\x01\\x7f', '\\u00a0\\u2028'] }}", {}),
    ("print_floats", "{{ [3.0, -0.0, 1e22, 123456789012345678.0, 0.0001, 0.00001, 1.5e300, 2.5e-300, 1/3] }}", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e\\x41\\u00e9\\U0001F600\\101\\q' }}", {}),
    ("string_concat_adjacent", "{{ 'a' 'b' \"c\" }}", {}),
    ("numbers_literals", "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_0.5_0 }} {{ 2e3 }}", {}),
    ("undefined_prints_empty", "[{{ nothing }}][{{ d.missing }}][{{ l[10] }}]", {"d": {"a": 1}, "l": [1]}),
    ("print_namespace_loop", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", {}),
    # operators
    ("arith", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("arith_mixed", "{{ 1 + 2.5 }} {{ true + 1 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'a' ~ 1 ~ none ~ [1] }} {{ [1, 2] + [3] }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' != 'b' }} {{ none == none }} {{ true == 1 }}", {}),
    ("logic", "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ not 0 }} {{ not 'a' }} {{ none or none }}", {}),
    ("in_operator", "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' in nothing }} {{ 1.0 in [1] }}", {}),
    ("ternary", "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}] {{ 'a' if false else 'b' if true else 'c' }}", {}),
    ("string_ops", "{{ 'abc'[1] }} {{ 'abc'[-1] }} {{ 'héllo'[1] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[::2] }} {{ 'héllo wörld'[-5:] }} {{ 'abc'[5:] }}", {}),
    ("list_slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ l[10:] }} {{ l[1:4:2] }} {{ l[-1:-4:-1] }} {{ l[-100:2] }}", {"l": [0, 1, 2, 3, 4]}),
    ("attr_vs_item", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ l[0].x }} {{ l.0.x }}", {"d": {"a": 1, "b": {"c": 2}}, "l": [{"x": "y"}]}),
    ("dict_attr_method_shadow", "{{ d['items'] }} {{ d.get('items') }} {{ d.items()|list }}", {"d": {"items": "key"}}),
    ("negative_index", "{{ messages[-1]['role'] }} {{ messages[-1].content }}", {"messages": MSGS}),
    # statements
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }}]{% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_filter_cond", "{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }},{% endfor %}", {}),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("set_scoping", "{% set c = 0 %}{% for i in [1, 2, 3] %}{{ c }}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}", {}),
    ("set_in_if_leaks", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
    ("set_block", "{% set body %}hello {{ 'world' }}{% endset %}[{{ body }}]{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("namespace", "{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }} {{ ns.items }}", {}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Z') }}", {}),
    ("macro_sees_later_globals", "{% macro m() %}[{{ g }}]{% endmacro %}{% set g = 5 %}{{ m() }}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("generation_tag", "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}", {"messages": MSGS}),
    ("print_tag", "{% print 'x', 1 %}", {}),
    # filters
    ("f_length_count", "{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|count }} {{ nothing|length }}", {}),
    ("f_join", "{{ [1, 'a', none]|join(', ') }} {{ 'abc'|join('-') }} {{ users|join(', ', attribute='name') }}", {"users": [{"name": "a"}, {"name": "b"}]}),
    ("f_case", "{{ 'hELLo wORLD'|upper }} {{ 'HeLLo'|lower }} {{ 'hello big-world (x)'|title }} {{ 'hELLO wORLD'|capitalize }} {{ 'ßtraße ǅ'|upper }}", {}),
    ("f_replace_trim", "{{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} [{{ '  x  '|trim }}] [{{ 'xxhixx'|trim('x') }}] {{ 'abc'|replace('', '.') }}", {}),
    ("f_default", "{{ nothing|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }} {{ 'v'|default('d') }}", {}),
    ("f_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]", {}),
    ("f_list_items", "{{ 'ab'|list }} {{ {'a': 1, 'b': 2}|items|list }} {{ {'x': 1}|list }} {{ nothing|list }}", {}),
    ("f_selectattr", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ messages|rejectattr('role', 'eq', 'system')|list|length }} {{ messages|selectattr('content')|list|length }}", {"messages": MSGS + [{"role": "user", "content": ""}]}),
    ("f_select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }} {{ ['a', 'b', 'c']|reject('in', ['b'])|list }} {{ [1, 5, 10]|select('gt', 3)|list }}", {}),
    ("f_map", "{{ ['a', 'b']|map('upper')|list }} {{ messages|map(attribute='role')|join(',') }} {{ [{'a': {'b': 1}}]|map(attribute='a.b')|list }} {{ [{}]|map(attribute='x', default='dflt')|list }}", {"messages": MSGS}),
    ("f_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1.0, 1e20, none, true]|tojson }}|{{ {}|tojson(indent=2) }}|{{ d|tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}", {"d": {"b": [1, {"c": "ü"}], "a": None, "e": [], "n": 1.5}}),
    ("f_tojson_keys", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}", {}),
    ("f_string_int_float", "{{ 5|string ~ 'x' }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '1.5'|float }} {{ 'a'|float }} {{ 2|float }} {{ ' 12 '|int }} {{ '1_000'|int }}", {}),
    ("f_abs_round", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 1234.5|round(-2) }}", {}),
    ("f_reverse_sort_unique", "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [1, 2, 1, 3]|unique|list }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|list }} {{ users|sort(attribute='age')|map(attribute='name')|join }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]}),
    ("f_min_max_sum", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ users|sum(attribute='age') }} {{ ['B', 'a']|max }}", {"users": [{"age": 3}, {"age": 4}]}),
    ("f_dictsort", "{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}", {}),
    ("f_indent_center", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(1, blank=true) }}|[{{ 'ab'|center(7) }}]", {}),
    ("f_misc", "{{ 'a b  c'|wordcount }} {{ 'hello world foo'|truncate(9) }} {{ '%s-%d-%.2f'|format('x', 3, 2.5) }} {{ '<a href=\"x\">&</a>'|escape }} {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ d|attr('a') }}", {"d": {"a": 1}}),
    ("f_chained", "{{ messages|map(attribute='content')|map('upper')|join('|')|lower|replace('|', '+')|length }}", {"messages": MSGS}),
    # tests
    ("tests_types", "{{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.5 is float }} {{ d is mapping }} {{ l is mapping }} {{ l is iterable }} {{ 's' is iterable }} {{ 1 is iterable }} {{ l is sequence }} {{ d is sequence }} {{ true is boolean }} {{ 1 is boolean }}", {"d": {}, "l": []}),
    ("tests_defined", "{{ x is defined }} {{ x is undefined }} {{ d.a is defined }} {{ d.b is defined }} {{ none is none }} {{ 0 is none }} {{ d.a is not none }} {{ nothing is iterable }} {{ nothing is sequence }} {{ range is callable }}", {"d": {"a": None}}),
    ("tests_values", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 2 is eq 2 }} {{ 3 is gt 2 }} {{ 2 is lt 1 }} {{ 'b' is in 'abc' }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 2 is ne 3 }} {{ 1 is sameas 1 }} {{ none is sameas none }}", {}),
    ("tests_not", "{{ 1 is not string }} {{ not 1 is string }} {{ x is not defined }}", {}),
    # methods
    ("m_string", "{{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXb'.replace('X', 'y') }}|{{ 'héllo'.find('l') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '42'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ '5'.zfill(3) }}|{{ 'ab'.center(6, '*') }}|{{ 'k=v'.partition('=') }}", {}),
    ("m_think_split", "{% set c = m.split('</think>')[-1].lstrip('\\n') %}{% set r = m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]", {"m": "<think>\nreason here\n</think>\n\nanswer"}),
    ("m_dict", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {"d": {"a": 1, "b": 2}}),
    ("m_list", "{{ l.index(2) }} {{ l.count(1) }}", {"l": [1, 2, 1]}),
    # globals
    ("g_range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", {}),
    ("g_dict", "{{ dict(a=1, b='x') }} {{ dict({'z': 1}, y=2) }}", {}),
    ("g_strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %a %A %b %B %d %j %p %y') }}|{{ strftime_now('%d %b %Y') }}", {}),
    # undefined semantics
    ("undef_in_if", "{% if nothing %}y{% else %}n{% endif %}{% if nothing.x is defined %}{% endif %}", {}),
    ("undef_loop_empty", "{% for x in nothing %}x{% else %}none{% endfor %}", {}),
    ("undef_eq", "{{ nothing == nothing }} {{ nothing == none }} {{ nothing != 1 }}", {}),
    ("undef_filters", "[{{ nothing|trim }}][{{ nothing|string }}][{{ nothing|upper }}][{{ nothing|join }}]", {}),
    ("none_attr", "[{{ none.x }}][{{ none['x'] }}]", {}),
    # real-template idioms
    ("idiom_system_extract", "{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content']|trim %}{% set messages = messages[1:] %}{% else %}{% set system_message = '' %}{% endif %}[{{ system_message }}]{% for m in messages %}{{ m.role }};{% endfor %}", {"messages": MSGS}),
    ("idiom_reverse_index", "{% for message in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{{ index }}{{ message.role[0] }}{% endfor %}", {"messages": MSGS}),
    ("idiom_content_list", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}{% endif %}|{% endfor %}", {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "b"}]}]}),
    ("idiom_tool_args_items", "{% for k, v in args|items %}{{ k }}=\"{{ v }}\"{% if not loop.last %}, {% endif %}{% endfor %}", {"args": {"query": "x", "n": 2}}),
    # errors
    ("err_undefined_attr", "{{ nothing.attr }}", {}),
    ("err_undefined_add", "{{ nothing + 1 }}", {}),
    ("err_type_add", "{{ 'a' + 1 }}", {}),
    ("err_raise", "{{ raise_exception('custom failure') }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_unsafe_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("err_call_undefined", "{{ nofunc() }}", {}),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", {}),
    ("err_range_too_big", "{{ range(1000000)|length }}", {}),
    ("err_tojson_undefined", "{{ nothing|tojson }}", {}),
    ("err_compare_types", "{{ 1 < 'a' }}", {}),
    ("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("err_syntax_unclosed", "{% if true %}x", {}),
    ("err_syntax_unknown_tag", "{% frobnicate %}", {}),
    ("err_syntax_unknown_filter", "{{ 1|nosuchfilter }}", {}),
    ("err_syntax_unknown_test", "{{ 1 is nosuchtest }}", {}),
    ("err_syntax_bad_expr", "{{ 1 + }}", {}),
    ("err_syntax_unclosed_var", "{{ 1 ", {}),
    ("err_syntax_unclosed_comment", "{# never closed", {}),
    ("err_syntax_break_outside", "{% break %}", {}),
    ("err_syntax_bad_paren", "{{ (1 ] }}", {}),
    ("err_syntax_unclosed_string", "{{ 'abc }}", {}),
    ("err_syntax_endfor_without_for", "{% endfor %}", {}),
]


def run_features():
    out = []
    for name, source, variables in FEATURES:
        rec = {"name": name, "template": source, "vars": variables}
        try:
            rec["expected"] = ENV.from_string(source).render(**variables)
        except Exception as e:  # TemplateError, TypeError, ZeroDivisionError, SecurityError...
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    path = os.path.join(OUT, "jinja_features.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{path}: {len(out)} cases ({sum('error' in r for r in out)} errors)")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    run_template_cases()
    run_features()
    sys.exit(0)
