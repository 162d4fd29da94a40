/* The CPU backend the CPU tests run the step program on: one per test program, made at first use
 * on OpenMP's default thread count, and kept until the program exits. */
#ifndef TT_TESTS_TEST_BACKEND_H
#define TT_TESTS_TEST_BACKEND_H

#include "ops/backend.h"

static inline const tt_backend *tt_test_cpu_backend(void) {
    static tt_backend *backend;
    if (!backend) backend = tt_backend_cpu_create(0);
    return backend;
}

#endif
