/* The CPU kernels in fp64, for the finite-difference gradient check (tests/test_gradcheck.c). */
#include "ops/cpu/ops_cpu.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/adamw_scalars.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/dropout_mask.h"

/* `real` is defined after every header: OpenBLAS's headers use `real` as a field name. */
#define real double
#define TT_CPU_REAL_IS_DOUBLE 1
#define TT_CPU_FN(name) tt_cpu_##name##_f64
#include "ops/cpu/ops_cpu_impl.h"
