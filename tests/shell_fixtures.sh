# Sourced by the shell tests: check(), which counts what passed and failed, and the byte-level tiny Llama they
# train (its config.json and a token file cut from README.md).
passed=0; failed=0
check() { # description, command... (a failure shows the tail of the newest *.txt: the last run's output)
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); return; fi
  failed=$((failed + 1)); echo "FAIL: $what" >&2
  local last; last=$(ls -t -- *.txt 2>/dev/null | head -1)
  [ -n "$last" ] && { echo "---- tail of $last" >&2; tail -8 "$last" >&2; }
  return 0
}

# byte_llama DIR LAYERS MAX_POSITIONS: DIR/config.json, a Llama of hidden size 16 over the 257 byte-level tokens
byte_llama() {
  mkdir -p "$1"
  cat > "$1/config.json" <<JSON
{"model_type": "llama", "vocab_size": 257, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": $2,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": $3, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32"}
JSON
}

# byte_qwen3 DIR: DIR/config.json, a tied Qwen3 of hidden size 32 over tests/fixtures/data/bytes_tokenizer's 259 ids
byte_qwen3() {
  mkdir -p "$1"
  cat > "$1/config.json" <<'JSON'
{"model_type": "qwen3", "vocab_size": 259, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "torch_dtype": "float32"}
JSON
}

# byte_corpus TIERTRAIN SOURCE_DIR BYTES OUT: the first BYTES of README.md (repeated as needed) as a byte-level
# token file OUT, its text in OUT.txt
byte_corpus() {
  for i in 1 2 3 4 5 6 7 8; do cat "$2/README.md"; done | head -c "$3" > "$4.txt"
  "$1" tokenize --bytes -o "$4" "$4.txt" > /dev/null
}

# metrics_close A B TOL [FIRST]: the losses and gradient norms of two metrics.jsonl files (4 steps each) agree to a
# relative TOL in their FIRST steps (default 4); a failure prints both files' figures and their relative differences
metrics_close() {
  paste -d ' ' <(grep '"grad_norm"' "$1" | sed -E 's/.*"loss": ([^,]*),.*"grad_norm": ([^,]*),.*/\1 \2/') \
               <(grep '"grad_norm"' "$2" | sed -E 's/.*"loss": ([^,]*),.*"grad_norm": ([^,]*),.*/\1 \2/') |
    awk -v tol="$3" -v first="${4:-4}" -v left="$1" -v right="$2" '
         function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return m > 0 ? d / m : d }
         { n++; if (n <= first && (rel($1, $3) > tol || rel($2, $4) > tol)) bad = 1
           row[n] = sprintf("  step %d: loss %s / %s (%.2e), grad_norm %s / %s (%.2e)", n, $1, $3, rel($1, $3), $2, $4,
                            rel($2, $4)) }
         END { if (bad || n != 4) { print "  " left " / " right ", tolerance " tol ":" > "/dev/stderr"
                                    for (i = 1; i <= n; i++) print row[i] > "/dev/stderr" }
               exit (bad || n != 4) }'
}

# byte_chat_tokenizer SOURCE_DIR DIR: DIR holds tests/fixtures/data/bytes_tokenizer's tokenizer.json (a token per byte)
# and a tokenizer_config.json whose chat template writes "<role>content" a turn, the EOS after an assistant's, and
# "<assistant>" as the generation prompt
byte_chat_tokenizer() {
  mkdir -p "$2"
  cp "$1/tests/fixtures/data/bytes_tokenizer/tokenizer.json" "$2/"
  cat > "$2/tokenizer_config.json" <<'JSON'
{"bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<pad>",
 "chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"}
JSON
}
