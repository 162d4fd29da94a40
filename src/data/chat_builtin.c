/* The built-in chat templates, by axolotl's names (axolotl/utils/chat_templates/templates/):
 * what `chat_template: <name>` renders when the name is not tokenizer_default or jinja.
 *
 *  chatml  <|im_start|>{role}\n{content}<|im_end|>\n per message, "<|im_start|>assistant\n" as the
 *          generation prompt.
 *  llama3  Llama 3's header format: bos_token first, then per message
 *          <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|> (a content list
 *          of parts: the parts' text joined); "<|start_header_id|>assistant<|end_header_id|>\n\n" as
 *          the generation prompt.
 *  gemma   Gemma's turns: bos_token first, then <start_of_turn>{role}\n{content, trimmed}<end_of_turn>\n per message
 *          with the assistant's role written "model" (a content list: its parts' text, each trimmed); a system
 *          message, or roles that do not alternate user/assistant from a user, raise as Gemma's template does;
 *          "<start_of_turn>model\n" as the generation prompt.
 *  phi_3   Phi-3's turns: bos_token first, then <|system|>\n{content}<|end|>\n, <|user|>\n{content}<|end|>\n
 *          followed by <|assistant|>\n, and an assistant's {content}<|end|>\n after it (no generation prompt of its
 *          own: every user turn opens the assistant's).
 *  qwen3   Qwen3's own template (tests/fixtures/chat_templates/qwen3.jinja, byte for byte): tools,
 *          tool calls and responses, reasoning in <think> blocks after the last user query.
 *          (axolotl's qwen3 also reads a real_last_index variable, which its way of finding turns
 *          needs and tiertrain's does not: without it the two render the same.)
 * Every one is checked against renders made with jinja2 by tests/test_chat_data.c. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "data/chat_template.h"

static const char chatml[] = "{%- for message in messages -%}\n"
                             "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
                             "{%- endfor -%}\n"
                             "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

static const char llama3[] =
    "{%- for message in messages -%}\n"
    "{%- if message['content'] is string -%}\n"
    "{%- set text = message['content'] | trim -%}\n"
    "{%- else -%}\n"
    "{%- set text = message['content'] | selectattr('text', 'defined') | map(attribute='text') | join('') | trim -%}\n"
    "{%- endif -%}\n"
    "{%- set turn = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + text + '<|eot_id|>' -%}\n"
    "{{- (bos_token + turn) if loop.first else turn -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}\n";

static const char gemma[] =
    "{{- bos_token -}}\n"
    "{%- if messages[0]['role'] == 'system' -%}{{- raise_exception('System role not supported') -}}{%- endif -%}\n"
    "{%- for message in messages -%}\n"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\n"
    "{%- endif -%}\n"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' -}}\n"
    "{%- if message['content'] is string -%}{{- message['content'] | trim -}}\n"
    "{%- else -%}{%- for part in message['content'] if 'text' in part -%}{{- part['text'] | trim -}}{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<end_of_turn>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}\n";

static const char phi_3[] =
    "{{- bos_token -}}\n"
    "{%- for message in messages -%}\n"
    "{%- if message['role'] == 'system' -%}{{- '<|system|>\\n' + message['content'] + '<|end|>\\n' -}}\n"
    "{%- elif message['role'] == 'user' -%}\n"
    "{{- '<|user|>\\n' + message['content'] + '<|end|>\\n<|assistant|>\\n' -}}\n"
    "{%- elif message['role'] == 'assistant' -%}{{- message['content'] + '<|end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

static const char qwen3[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set content = message.content %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in message.content %}\n"
    "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}";

static const struct {
    const char *name, *text;
} builtins[] = {{"chatml", chatml}, {"llama3", llama3}, {"gemma", gemma}, {"phi_3", phi_3}, {"qwen3", qwen3}};

static char builtin_names[128];
static pthread_once_t builtin_names_once = PTHREAD_ONCE_INIT;

static void join_builtin_names(void) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        snprintf(builtin_names + strlen(builtin_names), sizeof builtin_names - strlen(builtin_names), "%s%s",
                 i ? ", " : "", builtins[i].name);
}

const char *tt_chat_builtin_names(void) { /* the table's names, in its order */
    pthread_once(&builtin_names_once, join_builtin_names);
    return builtin_names;
}

const char *tt_chat_builtin_template(const char *name) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0) return builtins[i].text;
    return NULL;
}
