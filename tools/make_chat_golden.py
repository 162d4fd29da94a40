#!/usr/bin/env python3
"""Renders every chat template x conversation of tests/fixtures/chat_templates exactly as
transformers' apply_chat_template does, into golden/<template>__<conversation>.txt plus
golden/spans.json (byte [start, end) of each {% generation %} block) and golden/errors.json.

Two modes:
  --mode transformers  calls transformers' own renderer (transformers.utils.chat_template_utils:
                       render_jinja_template, else _compile_jinja_template); no tokenizer, no network.
  --mode jinja2        plain jinja2 set up as transformers sets it up (ImmutableSandboxedEnvironment,
                       trim_blocks, lstrip_blocks, loopcontrols, tojson, raise_exception,
                       strftime_now, the generation tag). Run it with Debian's /usr/bin/python3.
  --check              compares with the committed goldens instead of writing them (exit 1 on a
                       difference): how the lead confirms mode jinja2 against transformers.
"""
import argparse
import json
import os
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "chat_templates")


class TemplateError(Exception):
    pass


def jinja2_renderer():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTracker(Extension):
        """{% generation %}...{% endgeneration %}: renders the body and records its span.
        Spans are found through markers that cannot occur in the fixtures, then stripped."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

        def _mark(self, caller):
            return "\x01" + caller() + "\x02"

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, context):
        text = env.from_string(template).render(**context)
        spans, out, start = [], [], None
        for ch in text:
            if ch == "\x01":
                start = len("".join(out).encode("utf-8"))
            elif ch == "\x02":
                spans.append([start, len("".join(out).encode("utf-8"))])
            else:
                out.append(ch)
        return "".join(out), spans

    return render


def transformers_renderer():
    from transformers.utils import chat_template_utils as ctu

    def to_bytes(text, spans):
        return [[len(text[:s].encode("utf-8")), len(text[:e].encode("utf-8"))] for s, e in spans]

    if hasattr(ctu, "render_jinja_template"):
        def render(template, context):
            ctx = dict(context)
            messages = ctx.pop("messages")
            tools = ctx.pop("tools", None)
            agp = ctx.pop("add_generation_prompt", False)
            try:
                rendered, indices = ctu.render_jinja_template(
                    conversations=[messages], tools=tools, documents=None, chat_template=template,
                    return_assistant_tokens_mask=True, continue_final_message=False,
                    add_generation_prompt=agp, **ctx)
            except Exception as e:  # transformers wraps raise_exception in jinja2's TemplateError
                raise TemplateError(str(e)) from e
            text = rendered[0]
            return text, to_bytes(text, indices[0] if indices else [])
        return render

    def render(template, context):  # older releases: the compiled template and its AssistantTracker
        compiled = ctu._compile_jinja_template(template)
        try:
            if hasattr(ctu, "_render_with_assistant_indices"):
                text, indices = ctu._render_with_assistant_indices(compiled_template=compiled, **context)
                return text, to_bytes(text, indices)
            text = compiled.render(**context)
        except Exception as e:
            raise TemplateError(str(e)) from e
        return text, None  # no span tracking reachable: compare text only
    return render


def cases(data):
    templates = sorted(f[:-6] for f in os.listdir(FIXTURES) if f.endswith(".jinja"))
    for conv in data["conversations"]:
        for name in templates:
            if "templates" in conv and name not in conv["templates"]:
                continue
            yield name, conv


def context_for(data, conv, messages=None):
    ctx = dict(data["special_tokens"])
    ctx["messages"] = messages if messages is not None else conv["messages"]
    ctx["add_generation_prompt"] = conv.get("add_generation_prompt", False)
    if conv.get("tools"):
        ctx["tools"] = data["tools"]
    return ctx


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["jinja2", "transformers"], default="jinja2")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    render = jinja2_renderer() if args.mode == "jinja2" else transformers_renderer()
    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        data = json.load(f)
    golden = os.path.join(FIXTURES, "golden")
    os.makedirs(golden, exist_ok=True)

    def template(name):
        with open(os.path.join(FIXTURES, name + ".jinja"), encoding="utf-8") as f:
            return f.read()

    spans, errors, bad = {}, [], 0
    for name, conv in cases(data):
        key = f"{name}__{conv['name']}"
        text, sp = render(template(name), context_for(data, conv))
        path = os.path.join(golden, key + ".txt")
        if args.check:
            with open(path, "rb") as f:
                if f.read() != text.encode("utf-8"):
                    print(f"DIFFERS: {key}")
                    bad += 1
        else:
            with open(path, "wb") as f:
                f.write(text.encode("utf-8"))
        spans[key] = sp
    for e in data["errors"]:
        try:
            render(template(e["template"]), context_for(data, e, e["messages"]))
            msg = None
        except TemplateError as ex:
            msg = str(ex)
        if msg != e["message"]:
            print(f"ERROR CASE {e['template']}: raised {msg!r}, fixture says {e['message']!r}")
            bad += 1
    spans_path = os.path.join(golden, "spans.json")
    if args.check:
        with open(spans_path) as f:
            old = json.load(f)
        for k, v in spans.items():
            if v is not None and old.get(k) != v:
                print(f"SPANS DIFFER: {k}: {v} vs {old.get(k)}")
                bad += 1
        print(f"{len(spans)} renders checked, {bad} differences")
        return 1 if bad else 0
    with open(spans_path, "w") as f:
        json.dump(spans, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(spans)} goldens written to {golden}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
