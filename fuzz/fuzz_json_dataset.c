/* Fuzzes JSON datasets: the record reader (data/json_records.c: JSONL or a JSON array, UTF-8
 * checks, one record at a time), then each record's texts by dataset type and their tokens and
 * label masks (data/sft_examples.c) with the byte-level tokenizer fixture of tests/. Input: one
 * byte choosing the type and train_on_inputs, then the dataset file. */
#include "fuzz_common.h"
#include "data/json_records.h"
#include "data/sft_examples.h"
#include "data/tokenizer.h"

#ifndef FUZZ_FIXTURES
#error "FUZZ_FIXTURES (tests/fixtures of the source tree) is set by the Makefile"
#endif

static tt_tokenizer *tok;
static tt_sft_ids special;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    tok = tt_tokenizer_load(FUZZ_FIXTURES "/data/bytes_tokenizer");
    special.bos = tt_tokenizer_token_to_id(tok, "<s>");
    special.eos = tt_tokenizer_token_to_id(tok, "<|endoftext|>");
    fuzz_setup(); /* after the tokenizer: its JSON tree is gone, and it keeps none */
    return 0;
}

static const tt_dataset_type types[] = {TT_DATASET_COMPLETION, TT_DATASET_ALPACA, TT_DATASET_INPUT_OUTPUT};

static tt_json_records *records;
static json_t *record;
static tt_sft_example example;
static tt_token_ids ids;
static uint8_t *labels;
static int64_t label_capacity;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    const char *path = fuzz_input_path(data + 1, size - 1);
    tt_dataset_spec spec = {.type = types[mode % 3],
                            .field = (mode & 8) ? "body" : "text",
                            .field_instruction = "instruction",
                            .field_input = "input",
                            .field_output = "output"};
    const bool train_on_inputs = (mode & 4) != 0;
    records = NULL;
    record = NULL;
    memset(&example, 0, sizeof example);
    FUZZ_TRY {
        records = tt_json_records_open(path);
        while ((record = tt_json_records_next(records)) != NULL) {
            tt_sft_record_segments(&spec, train_on_inputs, record, tt_json_records_where(records), &example);
            tt_sft_tokenize_example(tok, &special, &example, 0, &ids, &labels, &label_capacity);
            tt_sft_example_free(&example);
            json_decref(record);
            record = NULL;
        }
        tt_json_records_close(records);
        records = NULL;
    }
    FUZZ_CATCH {}
    /* what a tt_die left: the reader (its FILE too, or the descriptors run out), the example;
     * the record's JSON tree goes with fuzz_json_release_all */
    tt_json_records_discard(records);
    tt_sft_example_free(&example);
    fuzz_json_release_all();
    return 0;
}
