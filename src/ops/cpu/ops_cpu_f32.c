/* The CPU kernels in fp32: the compute precision of tt_backend_cpu(), with tiertrain's own GEMM
 * (gemm_cpu.h), not a BLAS. */
#include "ops/cpu/ops_cpu.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/adamw_scalars.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/dropout_mask.h"

/* `real` is defined after every header. */
#define real float
#define TT_CPU_REAL_IS_DOUBLE 0
#define TT_CPU_FN(name) tt_cpu_##name##_f32
#include "ops/cpu/ops_cpu_impl.h"
