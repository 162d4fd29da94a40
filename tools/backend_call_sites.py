#!/usr/bin/env python3
"""Rewrites calls through the old backend table into the {iface, ctx} wrappers of src/ops/backend.h:

    b->linear_forward(y, x, ...)        ->  tt_backend_linear_forward(b, y, x, ...)
    s->backend->synchronize()           ->  tt_backend_synchronize(s->backend)

for every entry that has a tt_backend_<entry> wrapper in backend.h, where the receiver is `b`, `be`,
`backend` or an expression ending in `backend` (s->backend, model.backend). For merging code written
against the table without a context; it edits the files in place and prints what it changed. What it
does not do (by hand): configure (gone: the size queries and prepare take tt_backend_settings, from
tt_plan_backend_settings(plan)), set_scratch (prepare / release), function pointers passed as
callbacks (backend->iface-><entry> with backend->ctx), tt_backend_cpu() (tt_backend_cpu_create) and
tt_backend_cuda() (tt_backend_cuda_create(0)).

    tools/backend_call_sites.py FILE...
"""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
header = open(os.path.join(here, "..", "src", "ops", "backend.h")).read()
entries = re.findall(r"static inline [^(]*\btt_backend_(\w+)\(", header)
call = re.compile(r"([A-Za-z_]\w*(?:(?:->|\.)[A-Za-z_]\w*)*)->(" + "|".join(entries) + r")\((\)?)")


def rewrite(match):
    receiver, entry, closed = match.groups()
    if receiver not in ("b", "be", "backend") and not receiver.endswith("backend"):
        return match.group(0)
    return "tt_backend_%s(%s%s" % (entry, receiver, ")" if closed else ", ")


for path in sys.argv[1:]:
    text = open(path).read()
    new, count = call.subn(rewrite, text)
    if new != text:
        open(path, "w").write(new)
        print("%s: %d call(s) rewritten" % (path, count))
