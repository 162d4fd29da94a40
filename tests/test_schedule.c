/* Learning-rate schedules against transformers' own (tests/fixtures/schedules/transformers.json, made with
 * tools/make_schedule_golden.py: get_scheduler for every lr_scheduler name tiertrain takes, peak 1e-3, 20 steps, with
 * 3 warmup steps and with none): the rate of every optimizer step of the run equals transformers' to 1e-12 relative.
 * cosine_with_min_lr there takes min_lr_rate 0.1, which is tiertrain's cosine_min_lr_ratio. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/run_config.h"
#include "test_util.h"
#include "train/schedule.h"

#define NAME_ITEM(member, name) {member, name},
static const struct {
    tt_lr_scheduler kind;
    const char *name;
} schedulers[] = {TT_LR_SCHEDULER_VALUES(NAME_ITEM)};

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fixtures/schedules/transformers.json", source_dir);
    json_error_t error;
    json_t *golden = json_load_file(path, 0, &error);
    TT_EXPECT(golden != NULL, "read %s: %s", path, error.text);
    if (!golden) return tt_test_summary("schedule");
    const double peak = json_real_value(json_object_get(golden, "peak"));
    const int64_t total = json_integer_value(json_object_get(golden, "total_steps"));
    int compared = 0;
    for (size_t s = 0; s < sizeof schedulers / sizeof schedulers[0]; s++) {
        for (int warmup = 0; warmup <= 3; warmup += 3) {
            char key[96];
            snprintf(key, sizeof key, "%s:%d", schedulers[s].name, warmup);
            json_t *rates = json_object_get(json_object_get(golden, "rates"), key);
            TT_EXPECT(json_is_array(rates), "transformers' rates of %s are in the fixture", key);
            if (!rates) continue;
            const tt_lr_schedule schedule = {
                .kind = schedulers[s].kind,
                .peak = peak,
                .warmup_steps = warmup,
                .total_steps = total,
                .min_ratio = schedulers[s].kind == TT_LR_COSINE_WITH_MIN_LR ? 0.1 : 0.0,
            };
            double worst = 0;
            int64_t worst_step = 0;
            for (int64_t step = 0; step < total; step++) { /* the steps a run of `total` steps takes */
                const double theirs = json_real_value(json_array_get(rates, (size_t)step));
                const double ours = tt_lr_at(&schedule, step);
                const double error_rel = fabs(ours - theirs) / (fabs(theirs) > 1e-30 ? fabs(theirs) : 1e-30);
                if (error_rel > worst) {
                    worst = error_rel;
                    worst_step = step;
                }
            }
            TT_EXPECT(worst <= 1e-12,
                      "%s: every step's rate is transformers' (worst relative difference %.3g at step %lld)", key,
                      worst, (long long)worst_step);
            compared++;
        }
    }
    TT_EXPECT(compared == 2 * (int)(sizeof schedulers / sizeof schedulers[0]), "%d schedules compared", compared);
    json_decref(golden);
    return tt_test_summary("schedule");
}
