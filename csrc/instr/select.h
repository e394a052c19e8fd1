/* Selections: WHERE_VV/VS/SV (out = a != 0 ? b : c; the condition a is
 * never differentiated; _VS: c one scalar, _SV: b one scalar) and CLIP
 * (out = min(max(a, b), c), b and c scalar constant bounds).  Forward and
 * reverse loops are array kernels in kernels.c (vectorised there). */

RT_FWD(WHERE_VV) { rt_kf_WHERE_VV(n, v, o, a, b, c); }
RT_REV(WHERE_VV) { rt_kr_WHERE_VV(fl, n, d, v, o, a, b, c); }
RT_TAN(WHERE_VV)
{
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + i] = v[a + i] != 0.0 ? ((fl & 2) ? t[b + i] : 0.0)
                                   : ((fl & 4) ? t[c + i] : 0.0);
}

RT_FWD(WHERE_VS) { rt_kf_WHERE_VS(n, v, o, a, b, c); }
RT_REV(WHERE_VS) { rt_kr_WHERE_VS(fl, n, d, v, o, a, b, c); }
RT_TAN(WHERE_VS)
{
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + i] = v[a + i] != 0.0 ? ((fl & 2) ? t[b + i] : 0.0)
                                   : ((fl & 4) ? t[c] : 0.0);
}

RT_FWD(WHERE_SV) { rt_kf_WHERE_SV(n, v, o, a, b, c); }
RT_REV(WHERE_SV) { rt_kr_WHERE_SV(fl, n, d, v, o, a, b, c); }
RT_TAN(WHERE_SV)
{
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + i] = v[a + i] != 0.0 ? ((fl & 2) ? t[b] : 0.0)
                                   : ((fl & 4) ? t[c + i] : 0.0);
}

/* Zero gradient at the bounds (autograd's convention). */
RT_FWD(CLIP) { rt_kf_CLIP(n, v, o, a, b, c); }
RT_REV(CLIP) { rt_kr_CLIP(fl, n, d, v, o, a, b, c); }
RT_TAN(CLIP)
{
    const double lo = v[b], hi = v[c];
    int64_t i;
    for (i = 0; i < n; i++) {
        const double f = v[o + i];
        t[o + i] = (fl & 1) && f != lo && f != hi ? t[a + i] : 0.0;
    }
}
