/* PYCALL: out[n] = a user's Python function of b operands (@rt.primitive).
 * a = its slot in the caller's callback table; ints[c + 3k .. c + 3k + 3) =
 * (offset, length, needs-adjoint 0/1) of operand k.  The sweeps call
 * p->callback(p->callback_ctx, mode, pc), which reads and writes the arenas
 * itself; a non-zero return stops the sweep with RT_CALLBACK_FAILED.  The
 * one instruction whose kernels need the program (rt_pycall_*), so vm/sweeps.c
 * calls them by hand rather than through RT_HAND. */

/* Forward: the caller's Python computes out (re-run at every replay). */
static inline int rt_pycall_forward(const rt_program *p, int64_t pc)
{
    return p->callback(p->callback_ctx, RT_CB_FORWARD, pc) != 0;
}

/* Reverse: an all-zero output adjoint contributes nothing (azmul, as every
 * kernel): the user's VJP is not called for it. */
static inline int rt_pycall_reverse(const rt_program *p, int64_t pc, const double *d,
                                    int64_t n, int64_t o)
{
    int64_t i;
    for (i = 0; i < n; i++)
        if (d[o + i] != 0.0)
            return p->callback(p->callback_ctx, RT_CB_REVERSE, pc) != 0;
    return 0;
}

static inline int rt_pycall_tangent(const rt_program *p, int64_t pc)
{
    return p->callback(p->callback_ctx, RT_CB_TANGENT, pc) != 0;
}

RT_VERIFY_FN(PYCALL)
{
    const rt_program *p = vc->p;
    const int64_t n = w[1], o = w[2], a = w[3], b = w[4], c = w[5];
    int64_t k;
    (void)len;
    if (p->callback == NULL)
        return rt_vfail(vc, "the program calls back into Python but has no callback");
    if (a < 0 || a >= p->n_callbacks)
        return rt_vfail(vc, "callback slot %lld is outside [0, %lld)", (long long)a,
                        (long long)p->n_callbacks);
    if (!rt_vints(vc, "operand list", c, 3 * b))
        return 0;
    for (k = 0; k < b; k++) {
        const int64_t off = p->ints[c + 3 * k], olen = p->ints[c + 3 * k + 1];
        const int32_t need = p->ints[c + 3 * k + 2];
        if (need != 0 && need != 1)
            return rt_vfail(vc, "operand %lld: needs-adjoint word %ld is not 0 or 1",
                            (long long)k, (long)need);
        if (!rt_vregion(vc, "a Python operand", off, olen, 0))
            return 0;
        if (!rt_voverlap(vc, "a Python operand", o, n, off, olen))
            return 0;
    }
    return 1;
}
