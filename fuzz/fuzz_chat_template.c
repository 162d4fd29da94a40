/* Fuzzes the Jinja chat-template interpreter (data/jinja_*.c): parses the input as a template,
 * then renders it with a small fixed conversation (system, user, assistant with a tool call, tool
 * result, user; tools; the special tokens) with and without add_generation_prompt. A render is
 * bounded in output, memory, loop iterations and call depth; a template that runs past libFuzzer's
 * -timeout is a finding. Input: the template text. */
#include "fuzz_common.h"
#include "data/jinja.h"

static const char conversation[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"pad_token\": \"<pad>\", \"unk_token\": null,"
    " \"add_generation_prompt\": false,"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    "   \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    " \"messages\": ["
    "  {\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
    "  {\"role\": \"user\", \"content\": \"Gr\\u00fc\\u00dfe! What is 2+2?\\n\"},"
    "  {\"role\": \"assistant\", \"content\": \"<think>\\nsimple\\n</think>\\n\\n4.\", \"tool_calls\": [{\"type\": \"function\","
    "    \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\\u00fcrich\"}}}]},"
    "  {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 3}\"},"
    "  {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"And 3+3?\"}]}]}";

static json_t *context[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 0; i < 2; i++) {
        json_error_t error;
        context[i] = json_loads(conversation, 0, &error);
        if (!context[i]) {
            fprintf(stderr, "fuzz_chat_template: the conversation does not parse: %s\n", error.text);
            abort();
        }
        json_object_set_new(context[i], "add_generation_prompt", json_boolean(i == 1));
    }
    fuzz_setup(); /* after the contexts: they live for the whole run */
    return 0;
}

static tt_jinja_template *template;
static tt_jinja_output output;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    template = NULL;
    memset(&output, 0, sizeof output);
    FUZZ_TRY {
        template = tt_jinja_parse((const char *)data, size, "fuzz.jinja", err, sizeof err);
        for (int i = 0; template && i < 2; i++) {
            tt_jinja_render(template, context[i], &output, err, sizeof err);
            tt_jinja_output_free(&output);
        }
    }
    FUZZ_CATCH {}
    tt_jinja_output_free(&output);
    tt_jinja_free(template);
    fuzz_json_release_all();
    return 0;
}
