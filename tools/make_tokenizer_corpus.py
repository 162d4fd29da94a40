#!/usr/bin/env python3
"""Write the tokenizer test corpus, deterministically: tests/fixtures/tokenizer/corpus/NNNN.txt.

usage: make_tokenizer_corpus.py [OUT_DIR]

About 1 MB of mixed documents, one per file: English prose (generated sentences), C and
Python code (generated), CJK, emoji with ZWJ sequences, combining
characters that NFC composes, whitespace runs (tabs, newlines, CRLF), numbers, the models'
special-token strings inside text, and invalid UTF-8 (so the files are bytes, not all text).
Needs only the standard library; the output depends only on this script (a fixed seed).
"""
import os
import random
import sys

rng = random.Random(20261125)

WORDS = ("the of and to in is was that for on with as by at from it an be this which or are have not but had "
         "his they you were her she there been one all we their has would when if so no will can more its out "
         "memory tensor gradient optimizer checkpoint layer token model training batch sequence attention "
         "don't isn't we're they've I'm you'll she'd IT'S WE'RE Hello world").split()
CJK = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自之着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读つのはにをたがでてとしれさかなあいうえおアイウエオカキクケコ한국어로된문장입니다"
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🧑🏿‍💻", "🤖", "✨", "👩‍❤️‍💋‍👨", "1️⃣"]
COMBINING = ["e\u0301", "a\u0300", "o\u0308", "n\u0303", "A\u030a", "c\u0327", "u\u0308\u0301", "\u1100\u1161\u11a8",
             "\u212b", "\u0041\u0323\u0302", "q\u0307\u0323", "\u00e9"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>",
            "<|start_header_id|>", "<|eot_id|>", "<s>", "</s>", "<unk>", "<think>", "</think>", "<|fim_prefix|>",
            "<|reserved_special_token_3|>", "< s>", "<|im_start", "<0x41>"]
INVALID = [b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\x80",
           b"\xf4\x90\x80\x80", b"\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfe\xff", b"\xe2\x28\xa1"]


def prose(n_sentences):
    out = []
    for _ in range(n_sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 18))]
        words[0] = words[0].capitalize()
        sentence = " ".join(words)
        if rng.random() < 0.2:
            sentence += f" {rng.randint(0, 10**rng.randint(1, 9))}"
        if rng.random() < 0.1:
            sentence += f" ({rng.random() * 1000:.3f}%)"
        out.append(sentence + rng.choice([".", ".", "!", "?", "...", ";"]))
    return " ".join(out)


def c_code():
    name = rng.choice(["buffer", "count", "tensor", "node", "offset"])
    return (f"static int {name}_sum(const int *{name}, size_t n) {{\n"
            f"    int total = 0;\n    for (size_t i = 0; i < n; i++) {{\n"
            f"\ttotal += {name}[i] * {rng.randint(1, 999)}; // accumulate\n    }}\n"
            f"    if (total > 0x{rng.randint(0, 65535):04x}) return -1;\n    return total;\n}}\n")


def py_code():
    name = rng.choice(["load", "parse", "encode", "train"])
    return (f"def {name}_items(items, limit={rng.randint(1, 100)}):\n"
            f"    \"\"\"Return the first items.\"\"\"\n    result = []\n"
            f"    for index, item in enumerate(items):\n        if index >= limit:\n            break\n"
            f"        result.append(f'{{index}}: {{item!r}}')\n    return result  # done\n\n\n")


def cjk(n):
    return "".join(rng.choice(CJK) for _ in range(n)) + rng.choice(["。", "，", "！", "？", "、", ""])


def mixed_document():
    parts = []
    for _ in range(rng.randint(5, 30)):
        kind = rng.randrange(9)
        if kind == 0:
            parts.append(prose(rng.randint(1, 6)))
        elif kind == 1:
            parts.append(c_code())
        elif kind == 2:
            parts.append(py_code())
        elif kind == 3:
            parts.append(cjk(rng.randint(3, 60)))
        elif kind == 4:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6))))
        elif kind == 5:
            parts.append(" ".join(rng.choice(COMBINING) + rng.choice(WORDS) for _ in range(rng.randint(1, 8))))
        elif kind == 6:
            parts.append(rng.choice(["   ", "\t\t", "\n\n\n", "\r\n", " \r\n ", "\t \n", "        ", "\u3000", "\u00a0",
                                     "\u2003", "\u200b", " \n\n  ",
                                     # Oniguruma's \s takes NEL and not the BOM; JavaScript's the reverse
                                     "a\u0085b", " \u0085 ", "\ufeffc", "\u180e", "x\u2028y"]))
        elif kind == 7:
            parts.append(rng.choice(SPECIALS))
        else:
            parts.append(f"{rng.randint(0, 10**12)} {rng.random():.6g} 3.14159 1,234,567 2026-11-25 ١٢٣ ⅷ ½")
        parts.append(rng.choice([" ", "", "\n", "  ", "\t", "\r\n", " ", " "]))
    return "".join(parts).encode("utf-8")


def with_invalid_bytes(data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.choice(INVALID)
    data.extend(rng.choice(INVALID))  # also at the very end: a cut-off sequence
    return bytes(data)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizer", "corpus"))
    documents = [b"", b"Hello world", b" ", b"\n", "héllo wörld".encode(), b"<|im_start|>user\nHi<|im_end|>",
                 b"<s>Hello</s> world <s>", b"\xff\xfe", b"   leading and trailing   ", "ﬁ ſ ẞ Ǆ K Å".encode(),
                 b"x" * 3000, b" " * 2000 + b"x", b"\n" * 500, b"1234567890" * 40, b"don't DON'T it's IT'S We'Re"]
    while sum(len(d) for d in documents) < 1_100_000:
        doc = mixed_document()
        if rng.random() < 0.3:
            doc = with_invalid_bytes(doc)
        if rng.random() < 0.05:
            doc = doc * rng.randint(2, 8)
        documents.append(doc)
    os.makedirs(out_dir, exist_ok=True)
    for i, doc in enumerate(documents):
        with open(os.path.join(out_dir, f"{i:04d}.txt"), "wb") as f:
            f.write(doc)
    print(f"wrote {out_dir}: {len(documents)} documents, {sum(len(d) for d in documents)} bytes")


if __name__ == "__main__":
    main()
