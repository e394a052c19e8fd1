/* Superinstructions the compiler fuses from a pair (or a chain) whose inner
 * result is used once.  Each rounds exactly as the instructions it replaces
 * and accumulates adjoints in their order, so fusing changes no bit. */

/* AXPY: out[n] = a[n] + b[0] * c[n], the product rounded first (MUL then ADD).
 * Arrays (n > 1) run kernels.c's vectorised loops, scalars the loops here. */
RT_FWD(AXPY)
{
    const double s = v[b];
    int64_t i;
    if (n > 1) { rt_kf_AXPY(n, v, o, a, b, c); return; }
    for (i = 0; i < n; i++) {
        const double prod = s * v[c + i];
        v[o + i] = v[a + i] + prod;
    }
}

/* The add's reverse, then the product's, in the order the two separate
 * instructions would accumulate them. */
RT_REV(AXPY)
{
    const double s = v[b];
    double sb = 0.0;
    int64_t i;
    if (n > 1) { rt_kr_AXPY(fl, n, d, v, o, a, b, c); return; }
    for (i = 0; i < n; i++) {
        const double g = d[o + i];
        if (g != 0.0) {
            if (fl & 1) d[a + i] += g;
            if (fl & 2) sb += g * v[c + i];
            if (fl & 4) d[c + i] += g * s;
        }
    }
    if (fl & 2) d[b] += sb;
}

/* MUL's tangent, then ADD's, rounded as the pair's ((0 + t1*d1) + t2*d2, a
 * zero tangent adding nothing), so a JVP of the fused program has the pair's
 * bits. */
RT_TAN(AXPY)
{
    const double bv = v[b], tb = (fl & 2) ? t[b] : 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        const double ta = (fl & 1) ? t[a + i] : 0.0, tc = (fl & 4) ? t[c + i] : 0.0;
        const double tm = (0.0 + (tb != 0.0 ? tb * v[c + i] : -0.0))
                          + (tc != 0.0 ? tc * bv : -0.0);
        t[o + i] = (0.0 + (ta != 0.0 ? ta * 1.0 : -0.0)) + (tm != 0.0 ? tm * 1.0 : -0.0);
    }
}

/* One element (isa scalar=True: vm/scalar_path.c): the n == 1 case of
 * the loops above, the same operations in the same order. */
RT_SFWD(AXPY)
{
    const double prod = v[b] * v[c];
    v[o] = v[a] + prod;
}

RT_SREV(AXPY)
{
    const double g = d[o];
    double sb = 0.0;
    if (RT_LIKELY(g != 0.0)) {
        if (fl & 1) d[a] += g;
        if (fl & 2) sb += g * v[c];
        if (fl & 4) d[c] += g * v[b];
    }
    if (fl & 2) d[b] += sb;
}

/* SQDIFF: out[n] = (a[n] - b[n])^2, the difference rounded first (SUB then SQUARE). */
RT_FWD(SQDIFF)
{
    int64_t i;
    if (n > 1) { rt_kf_SQDIFF(n, v, o, a, b); return; }     /* arrays: kernels.c */
    for (i = 0; i < n; i++) {
        const double s = v[a + i] - v[b + i];
        v[o + i] = s * s;
    }
}

/* SQUARE's reverse gives the difference its adjoint gt; SUB's reverse
 * (skipped when gt is zero) passes gt and -gt on. */
RT_REV(SQDIFF)
{
    int64_t i;
    if (n > 1) { rt_kr_SQDIFF(fl, n, d, v, o, a, b); return; }
    for (i = 0; i < n; i++) {
        const double g = d[o + i];
        if (g != 0.0) {
            const double s = v[a + i] - v[b + i], gt = g * (2.0 * s);
            if (gt != 0.0) {
                if (fl & 1) d[a + i] += gt * 1.0;
                if (fl & 2) d[b + i] += gt * -1.0;
            }
        }
    }
}

RT_TAN(SQDIFF)
{
    int64_t i;
    for (i = 0; i < n; i++) {
        const double dt = ((fl & 1) ? t[a + i] : 0.0) - ((fl & 2) ? t[b + i] : 0.0);
        t[o + i] = dt != 0.0 ? dt * (2.0 * (v[a + i] - v[b + i])) : 0.0;
    }
}

/* One element (isa scalar=True), as the loops above. */
RT_SFWD(SQDIFF)
{
    const double s = v[a] - v[b];
    v[o] = s * s;
}

RT_SREV(SQDIFF)
{
    const double g = d[o];
    if (RT_LIKELY(g != 0.0)) {
        const double s = v[a] - v[b], gt = g * (2.0 * s);
        if (RT_LIKELY(gt != 0.0)) {
            if (fl & 1) d[a] += gt * 1.0;
            if (fl & 2) d[b] += gt * -1.0;
        }
    }
}

/* SSD: out[1] = np.sum((a[n] - b[n])^2), numpy's pairwise order: REDUCE_SUM
 * of a whole SQDIFF, the squares never stored (kernels.c). */
RT_FWD(SSD) { rt_kf_SSD(n, v, o, a, b); }
RT_REV(SSD) { rt_kr_SSD(fl, n, d, v, o, a, b); }
RT_TAN(SSD) { t[o] = rt_kt_SSD(fl, n, t, v, a, b); }

/* GAXPY: out[k] = a[ints[c+2+k]] + b[0] * z[k], z = vals + ints[c], a has
 * ints[c+1] elements: GATHER then AXPY (kernels and their ordering argument
 * in csrc/kernels/gaxpy.h; flags 1: a, 2: b, 4: z). */
RT_FWD(GAXPY) { rt_gaxpy_forward(n, v, ints, o, a, b, c); }
RT_REV(GAXPY) { rt_gaxpy_reverse(fl, n, d, v, ints, o, a, b, c); }
RT_TAN(GAXPY) { rt_gaxpy_tangent(fl, n, t, v, ints, o, a, b, c); }

/* The record (z's offset, a's length) and the index map; z is a read
 * region of n the table cannot name (its offset is in the side table). */
RT_VERIFY_FN(GAXPY)
{
    const rt_program *p = vc->p;
    const int64_t n = w[1], o = w[2], c = w[5];
    int64_t zo;
    if (!rt_vints(vc, "gather-axpy record", c, 2) || !rt_vints(vc, "index map", c + 2, n))
        return 0;
    zo = p->ints[c];
    len->a = p->ints[c + 1];
    if (len->a < 0)
        return rt_vfail(vc, "negative input length %lld", (long long)len->a);
    return rt_vindices(vc, c + 2, n, len->a, "input") && rt_vregion(vc, "operand z", zo, n, 0)
           && rt_voverlap(vc, "operand z", o, n, zo, n);
}

/* CSUM (CppAD's cumulative sum): out[1] = a[0] +/- n scalar terms, added
 * left to right so that the partial sums round as the chain of adds they
 * replace.  ints[c + k] = e: e >= 0 adds v[e], e < 0 subtracts v[~e]. */
RT_FWD(CSUM)
{
    double acc = v[a];
    int64_t i;
    for (i = 0; i < n; i++) {
        const int32_t e = ints[c + i];
        if (e >= 0)
            acc = acc + v[e];
        else
            acc = acc - v[~e];
    }
    v[o] = acc;
}

/* Every link of the chain passes its adjoint on unchanged, so each term gets
 * g (or g * -1.0, as SUB's reverse gives it); the compiler fuses only terms
 * nothing else reads, so the order of these writes changes no bit.  Terms
 * always need an adjoint (flag 2). */
RT_REV(CSUM)
{
    const double g = d[o];
    int64_t i;
    if (g != 0.0) {
        if (fl & 1) d[a] += g * 1.0;
        for (i = 0; i < n; i++) {
            const int32_t e = ints[c + i];
            if (e >= 0)
                d[e] += g * 1.0;
            else
                d[~e] += g * -1.0;
        }
    }
}

RT_TAN(CSUM)
{
    double r = (fl & 1) ? t[a] : 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        const int32_t e = ints[c + i];
        if (e >= 0)
            r += t[e];
        else
            r -= t[~e];
    }
    t[o] = r;
}

/* CSUM always has one element (isa scalar=True): its kernels are its
 * scalar forms. */
RT_SFWD(CSUM) { rt_fwd_CSUM(v, ints, n, o, a, b, c); }
RT_SREV(CSUM) { rt_rev_CSUM(fl, v, d, ints, n, o, a, b, c); }

/* The term list: n side-table entries, each naming an arena slot. */
RT_VERIFY_FN(CSUM)
{
    const rt_program *p = vc->p;
    const int64_t n = w[1], c = w[5];
    int64_t k;
    (void)len;
    if (!rt_vints(vc, "term list", c, n))
        return 0;
    for (k = 0; k < n; k++) {
        const int32_t e = p->ints[c + k];
        const int64_t off = e >= 0 ? (int64_t)e : (int64_t)~e;
        if (off >= p->n_vals)
            return rt_vfail(vc, "term %lld: offset %lld is outside the value arena of %lld",
                            (long long)k, (long long)off, (long long)p->n_vals);
    }
    return 1;
}
