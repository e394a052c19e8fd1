/* GAXPY: out[i] = a[idx[i]] + b * z[i] (b one element) -- AXPY whose first
 * operand is a GATHER.  Hierarchical regressions predict each observation
 * from its group's intercept plus slope times covariate; fused, the gather's
 * copy and the scatter of its reverse disappear into AXPY's loops, and the
 * scatter runs beside the reverse's sum into b (a chain of dependent adds)
 * instead of after it.
 *
 * Words: n, o, a (the gathered array), b (the scale), c: an int-table
 * record  ints[c] = z's offset, ints[c+1] = the length of a,
 * ints[c+2 .. c+2+n) = the indices into a  (the VM's verifier checks all
 * three: csrc/instr/fused.h; flags 1 = a, 2 = b, 4 = z carry adjoints).
 *
 * The same arithmetic per element as GATHER then AXPY (so the same bits):
 * the product rounded first, then the add; in reverse, AXPY's terms with its
 * zero-adjoint rule and its left-to-right sum into b, and the gather's
 * reverse adding each element's adjoint to a[idx[i]] in order i.  The
 * compiler fuses only when no instruction between the gather and the add
 * reads a, and a's slots are apart from b's and z's (src/revtape/lower/compiler.py,
 * _array_fusion), so moving the scatter into AXPY's loop changes the order
 * of no slot's additions.  Included by csrc/instr/instr.h. */
#ifndef REVTAPE_GAXPY_H
#define REVTAPE_GAXPY_H

#include <stdint.h>

static inline void rt_gaxpy_forward(int64_t n, double *v, const int32_t *ints,
                                    int64_t o, int64_t a, int64_t b, int64_t c)
{
    const int32_t *idx = ints + c + 2;
    const double *z = v + ints[c], *src = v + a;
    const double t = v[b];
    double *out = v + o;
    int64_t i;
    for (i = 0; i < n; i++) {
        const double prod = t * z[i];
        out[i] = src[idx[i]] + prod;
    }
}

static inline void rt_gaxpy_reverse(uint32_t fl, int64_t n, double *d, const double *v,
                                    const int32_t *ints, int64_t o, int64_t a, int64_t b,
                                    int64_t c)
{
    const int32_t *idx = ints + c + 2;
    const double *go = d + o, *z = v + ints[c];
    double *da = d + a, *dz = d + ints[c];
    const double t = v[b];
    double sb = 0.0;
    int64_t i;
    if ((fl & 7) == 3) {                   /* the regression's case: a and b */
        for (i = 0; i < n; i++) {
            const double g = go[i];
            if (g != 0.0) {
                da[idx[i]] += g;
                sb += g * z[i];
            }
        }
    } else {
        for (i = 0; i < n; i++) {
            const double g = go[i];
            if (g != 0.0) {
                if (fl & 1) da[idx[i]] += g;
                if (fl & 2) sb += g * z[i];
                if (fl & 4) dz[i] += g * t;
            }
        }
    }
    if (fl & 2)
        d[b] += sb;
}

/* GATHER's tangent copy, then AXPY's (MUL's tangent, then ADD's). */
static inline void rt_gaxpy_tangent(uint32_t fl, int64_t n, double *t, const double *v,
                                    const int32_t *ints, int64_t o, int64_t a, int64_t b,
                                    int64_t c)
{
    const int32_t *idx = ints + c + 2;
    const int64_t zo = ints[c];
    const double bv = v[b], tb = (fl & 2) ? t[b] : 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        const double ta = (fl & 1) ? t[a + idx[i]] : 0.0, tz = (fl & 4) ? t[zo + i] : 0.0;
        const double tm = (0.0 + (tb != 0.0 ? tb * v[zo + i] : -0.0))
                          + (tz != 0.0 ? tz * bv : -0.0);
        t[o + i] = (0.0 + (ta != 0.0 ? ta * 1.0 : -0.0)) + (tm != 0.0 ? tm * 1.0 : -0.0);
    }
}

#endif
