/* Elementary functions written so that gcc vectorises the loops that call
 * them, with the same bits in every tier.
 *
 *   rt_log1p(x)   log(1 + x), within 1 ulp (max measured 0.85 ulp, see below)
 *
 * Why not libm's: glibc's log1p is a scalar call with branches, so an array
 * loop over it runs one element at a time (on student-t it was a third of
 * the replay) while numpy's own loops use SIMD versions.  This one is
 * branch-free straight-line code -- bit casts, integer adds and shifts,
 * + - * /, and selects for the special cases -- so the array kernels'
 * AVX-512/AVX2/SSE2 clones (csrc/kernels/kernels.c) vectorise it, and the VM's
 * one-element path, the tiled blocks and the native tier's generated C
 * (all compile this same inline function with no fused multiply-add: the
 * VM's and kernels.c's targets have none or -ffp-contract=off, native.py
 * passes -ffp-contract=off) get the same bits as the array loops.  Every op
 * row that evaluates log1p names rt_log1p (src/revtape/core/ops.py), so the
 * tiers agree with each other bit for bit; against numpy (the reference
 * replay) they agree within an ulp, as glibc's did (numpy's SIMD log1p
 * and glibc's differ in ~6% of [0, 10] already).
 *
 * Algorithm (the classic reduction, here without branches):
 *   u = 1 + x rounded; u = 2^k m with m in [sqrt(2)/2, sqrt(2)), found by
 *   subtracting the bit pattern of sqrt(2)/2 (bit patterns of positive
 *   doubles are ordered like their values, so the exponent field of the
 *   difference is k);  f = m - 1 (exact);  c = (x - (u - 1)) / u, the
 *   rounding error of 1 + x relative to u (x - (u - 1) is exact for
 *   -1 < x < 2^53; above, c is dropped: it is below 2^-52 of a result > 36;
 *   c is at most 2^-53 of a result >= 0.34 here, so its 1/u is taken in
 *   float -- 24 bits are plenty and a float division is several times
 *   cheaper than a double one);
 *   for x itself in [sqrt(2)/2 - 1, sqrt(2) - 1) there is no rounding to
 *   undo: k = 0, f = x, c = 0.
 *   log(1 + f) = 2 atanh(s), s = f / (2 + f), |s| <= 0.1716, z = s^2:
 *   log(1 + f) = f - hfsq + s (hfsq + R(z)), hfsq = f^2 / 2, where
 *   R(z) = z P(z) ~ 2 atanh(s) / s - 2 (the identity f = 2s + s f makes the
 *   two sides equal); P is a degree-6 Chebyshev fit of
 *   (2 atanh(sqrt z) / sqrt z - 2) / z on [0, 0.02946], computed with
 *   mpmath by tools/log1p_coeffs.py (error 3.1e-16 on P, ~0.04 ulp of the
 *   result).  k ln2 is added as k ln2_hi (exact: ln2_hi has 39 significant
 *   bits, |k| <= 1077) + k ln2_lo.
 *   Special cases by select: |x| < 2^-54 -> x (log1p(x) rounds to x there;
 *   keeps -0.0 and subnormals), x = +inf -> +inf, x = -1 -> -inf, x < -1 ->
 *   nan, nan -> nan.
 *
 * The int64 -> double conversion of k is done with the 2^52 trick (AVX-512F
 * and AVX2 have no vector instruction for it), the shift is logical (AVX2
 * has no 64-bit arithmetic shift): k + 1023 is never negative here.
 *
 * Accuracy (tools/log1p_coeffs.py --check): against mpmath on 6e5 points
 * over every binade from 2^-60 to 2^1023, (-1, 0) and the seams, max error
 * 0.85 ulp (at x = -0.2976: k = -1, where k ln2 and log(m) nearly cancel;
 * glibc's max on the same points: 0.81); away from the seams the error is
 * about 0.5 ulp.  tests/test_vecmath.py compares with math.log1p (glibc)
 * over ~8e5 points (<= 1 ulp apart, ~0.2% differ) and checks every special
 * value.  Floating-point flags: the VM does not report them (numpy's
 * warnings come from the reference replay only), so none are promised. */
#ifndef REVTAPE_VECMATH_H
#define REVTAPE_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Array loops (kernels.c defines RT_VECMATH_INLINE before including this)
 * need the function inlined, across the O3 pragma's different optimisation
 * options, which gcc does only when told to (always_inline); a call would
 * stop the vectoriser.  Everywhere else (the VM's one-element dispatch, the
 * native tier's scalar code, batch lanes) it stays an out-of-line call, as
 * libm's was, so the dispatch loop's code does not grow.  Same source, no
 * contraction: the same bits either way. */
#if defined(__GNUC__) && defined(RT_VECMATH_INLINE)
#define RT_VM_INLINE static inline __attribute__((always_inline))
#define RT_VM_FUNC RT_VM_INLINE
#elif defined(__GNUC__)
#define RT_VM_INLINE static inline
#define RT_VM_FUNC static __attribute__((noinline, unused))
#else
#define RT_VM_INLINE static inline
#define RT_VM_FUNC static inline
#endif

RT_VM_INLINE uint64_t rt_vm_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

RT_VM_INLINE double rt_vm_double(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

RT_VM_FUNC double rt_log1p(double x)
{
    const uint64_t SQRT1_2 = 0x3fe6a09e667f3bcdULL;  /* bits of sqrt(2)/2 */
    const double LN2_HI = 0x1.62e42fefa38p-1, LN2_LO = 0x1.ef35793c7673p-45;
    const double P0 = 0.666666666666667, P1 = 0.39999999999899005,
                 P2 = 0.2857142862620264, P3 = 0.22222211097729647,
                 P4 = 0.18182891824705943, P5 = 0.15331631907959511,
                 P6 = 0.14617557872993966;
    const double u = 1.0 + x;
    /* the exponent field of t is k + 1023, its mantissa field that of m */
    const uint64_t t = rt_vm_bits(u) - SQRT1_2 + (UINT64_C(0x3ff) << 52);
    const double m = rt_vm_double((t & UINT64_C(0x000fffffffffffff)) + SQRT1_2);
    /* k as a double: 2^52 + (k + 1023) has k + 1023 as its low bits */
    const double kb = rt_vm_double(UINT64_C(0x4330000000000000) | (t >> 52)) - 0x1p52 - 1023.0;
    const int near = x >= -0.2928932188134525 && x < 0.41421356237309503;
    const double k = near ? 0.0 : kb;
    const double f = near ? x : m - 1.0;
    const double c = near || kb > 53.0 ? 0.0 : (x - (u - 1.0)) * (double)(1.0f / (float)u);
    const double hfsq = 0.5 * f * f;
    const double s = f / (2.0 + f);
    const double z = s * s;
    const double R = z * (P0 + z * (P1 + z * (P2 + z * (P3 + z * (P4 + z * (P5 + z * P6))))));
    double r = k * LN2_HI + (f - (hfsq - (s * (hfsq + R) + (k * LN2_LO + c))));
    r = x > -0x1p-54 && x < 0x1p-54 ? x : r;
    r = x == (double)INFINITY ? x : r;
    r = x == -1.0 ? -(double)INFINITY : r;
    r = x < -1.0 ? (double)NAN : r;
    return x != x ? u : r;
}

#endif
