#!/usr/bin/env python3
"""render-chat.py renders chat templates exactly as Hugging Face transformers'
apply_chat_template(tokenize=False) renders them, as the reference for stx's
chat templates (runtime/chat/jinja2_test.go).

It reads a JSON list of cases on standard input, each an object:

    {"template": "...",                  the Jinja source
     "messages": [...],                  the conversation (any JSON)
     "tools": [...] or absent/null,      tool schemas
     "documents": [...] or absent/null,
     "add_generation_prompt": bool,
     "specials": {"bos_token": "<s>", ...},   transformers passes special_tokens_map
     "extra": {"enable_thinking": false, ...}} further apply_chat_template kwargs

and writes a JSON list of results in the same order: {"text": "..."} or
{"error": "ExceptionType: message"}. One process renders the whole batch.

The environment is transformers' _compile_jinja_template, reimplemented here
so that no transformers install is needed: ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and the
{% generation %} tag (AssistantTracker: renders its body as is), the tojson
filter replaced by json.dumps (ensure_ascii=False, indent, separators, no key
sorting), and the globals raise_exception and strftime_now. A template's
RecursionError or MemoryError is reported as an error like any other.

Jinja2 is imported from PYTHONPATH; scripts/fetch-jinja.sh installs the pinned
version. --version prints the version in use and exits.
"""

import json
import sys
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    # transformers tracks the indices of assistant-generated text with this
    # tag; for the rendered text it is a call block that renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers overrides Jinja's tojson, which escapes HTML characters.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


@lru_cache(maxsize=None)
def compile_template(source):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render(case):
    template = compile_template(case["template"])
    kwargs = dict(case.get("specials") or {})
    kwargs.update(case.get("extra") or {})
    return template.render(
        messages=case.get("messages"),
        tools=case.get("tools"),
        documents=case.get("documents"),
        add_generation_prompt=bool(case.get("add_generation_prompt", False)),
        **kwargs,
    )


def main():
    if sys.argv[1:] == ["--version"]:
        print(jinja2.__version__)
        return
    cases = json.load(sys.stdin)
    results = []
    for case in cases:
        try:
            results.append({"text": render(case)})
        except BaseException as e:  # noqa: BLE001 - a template's failure is a result
            if isinstance(e, KeyboardInterrupt):
                raise
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
