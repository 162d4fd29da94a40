/* What every backend shares: its destruction, with its op profile (the constructors are each backend's own). */
#include "ops/backend.h"

#include <stdlib.h>

void tt_backend_destroy(tt_backend *backend) {
    if (!backend) return;
    backend->iface->destroy(backend->ctx);
    free(backend->profile);
    free(backend);
}
