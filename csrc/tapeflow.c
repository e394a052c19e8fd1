/* The compiler's data-flow pass: see tapeflow.h. */
#include "tapeflow.h"

int64_t rt_tape_flow(int64_t n_instr, const int64_t *out, const int32_t *nargs,
                     const int64_t *args, const uint8_t *diff, int32_t guards_on,
                     uint8_t *dep, uint8_t *adj, uint8_t *live, uint8_t *keep, int32_t *uses)
{
    int64_t p = 0;
    for (int64_t i = 0; i < n_instr; i++) {
        const int64_t *a = args + p;
        int32_t na = nargs[i];
        uint8_t d = 0, g = 0;
        for (int32_t j = 0; j < na; j++) {
            d |= dep[a[j]];
            g |= adj[a[j]];
        }
        /* SSA: the result's flags are final once its operands' are */
        if (out[i] >= 0 && d) {
            dep[out[i]] = 1;
            if (diff[i] && g)
                adj[out[i]] = 1;
        }
        p += na;
    }
    int64_t kept = 0;
    for (int64_t i = n_instr - 1; i >= 0; i--) {
        int32_t na = nargs[i];
        p -= na;
        const int64_t *a = args + p;
        int k;
        if (out[i] < 0) {
            /* a guard on constants never changes: dropped */
            k = 0;
            if (guards_on)
                for (int32_t j = 0; j < na; j++)
                    k |= dep[a[j]];
        } else {
            k = live[out[i]] && dep[out[i]];
        }
        if (k) {
            keep[i] = 1;
            kept++;
            for (int32_t j = 0; j < na; j++) {
                live[a[j]] = 1;
                uses[a[j]]++;
            }
        }
    }
    return kept;
}
