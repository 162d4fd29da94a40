#!/usr/bin/env python3
"""Golden learning rates for tests/test_schedule.c: transformers' get_scheduler for each lr_scheduler name tiertrain
takes, peak 1e-3, over 20 steps with 3 warmup steps and with none; the rate each optimizer step uses (the scheduler's
value before its step() call). cosine_with_min_lr takes min_lr_rate 0.1 (what axolotl passes for
cosine_min_lr_ratio: 0.1); tiertrain's cosine with cosine_min_lr_ratio 0.1 is the same schedule.

usage: make_schedule_golden.py OUT.json   (on a machine with torch and transformers)
"""
import json
import sys

import torch
import transformers
from transformers import get_scheduler

PEAK, TOTAL = 1e-3, 20
out = {"transformers": transformers.__version__, "peak": PEAK, "total_steps": TOTAL, "rates": {}}
for name, kwargs in [("cosine", {}), ("linear", {}), ("constant", {}), ("constant_with_warmup", {}),
                     ("cosine_with_min_lr", {"min_lr_rate": 0.1}), ("polynomial", {}), ("inverse_sqrt", {})]:
    for warmup in (3, 0):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=PEAK)
        sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=TOTAL,
                              scheduler_specific_kwargs=kwargs)
        rates = []
        for _ in range(TOTAL + 2):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        out["rates"][f"{name}:{warmup}"] = rates
json.dump(out, open(sys.argv[1], "w"), indent=1)
print("wrote", sys.argv[1])
