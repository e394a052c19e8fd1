/* The op table's elementwise rows as scalar inline functions, one element at
 * a time: the VM's one-element paths (scalar code) and rt_elementwise call
 * them; kernels.c expands the same X-macro rows into its array loops.
 *
 *   rt_sf_NAME(x[, y])                  the value
 *   rt_sd_NAME(x, f)                    unary: d f / d x   (f: the value)
 *   rt_sdx_NAME(x, y, f), rt_sdy_NAME   binary: d f / d x, d f / d y
 *
 * Internal to the extension (and usable by generated C that includes it). */
#ifndef REVTAPE_SCALAR_H
#define REVTAPE_SCALAR_H

#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* M_2_SQRTPI and friends in <math.h> */
#endif
#include <math.h>
#include <stdint.h>

#include "generated/ops_generated.h"
#include "kernels/specfun.h"

#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390   /* 2 / sqrt(pi), used by ERF */
#endif

#define RT_SCALAR_U_(NAME, FX, DX)                                            \
    static inline double rt_sf_##NAME(const double x) { return FX; }          \
    static inline double rt_sd_##NAME(const double x, const double f)        \
    { (void)x; (void)f; return DX; }
#define RT_SCALAR_UND_(NAME, FX)                                              \
    static inline double rt_sf_##NAME(const double x) { return FX; }
#define RT_SCALAR_B_(NAME, FXY, DX, DY)                                       \
    static inline double rt_sf_##NAME(const double x, const double y) { return FXY; } \
    static inline double rt_sdx_##NAME(const double x, const double y, const double f) \
    { (void)x; (void)y; (void)f; return DX; }                                 \
    static inline double rt_sdy_##NAME(const double x, const double y, const double f) \
    { (void)x; (void)y; (void)f; return DY; }
#define RT_SCALAR_BND_(NAME, FXY)                                             \
    static inline double rt_sf_##NAME(const double x, const double y) { return FXY; }

RT_UNARY(RT_SCALAR_U_)
RT_UNARY_ND(RT_SCALAR_UND_)
RT_BINARY(RT_SCALAR_B_)
RT_BINARY_ND(RT_SCALAR_BND_)

#undef RT_SCALAR_U_
#undef RT_SCALAR_UND_
#undef RT_SCALAR_B_
#undef RT_SCALAR_BND_

#endif
