/* Triangular solves in place, shared by TRISOLVE and the LU solves.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_TRI_H
#define REVTAPE_LINALG_TRI_H

/* X := op(L)^-1 X in place, X n x m; op(L) = L or L^T; only L's `lower`
 * (else upper) triangle is read, and its diagonal only if !unit. */
RT_CLONES static void tri_solve(const double *L, double *X, int64_t n, int64_t m, int lower, int trans,
                      int unit)
{
    int64_t i, k;
    if (!trans) {
        if (lower) {
            for (i = 0; i < n; i++) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (m == 1) {
                    xi[0] -= rt_ldot(li, X, i);
                } else {
                    for (k = 0; k < i; k++)
                        rt_laxpy(xi, -li[k], X + k * m, m);
                }
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
            }
        } else {
            for (i = n - 1; i >= 0; i--) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (m == 1) {
                    xi[0] -= rt_ldot(li + i + 1, X + i + 1, n - i - 1);
                } else {
                    for (k = i + 1; k < n; k++)
                        rt_laxpy(xi, -li[k], X + k * m, m);
                }
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
            }
        }
    } else {
        /* op(L)[i, k] = L[k, i]: finish row i of X, then take it out of the
         * rows still to come, reading row i of L (contiguous). */
        if (lower) {                        /* L^T is upper: last row first */
            for (i = n - 1; i >= 0; i--) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
                if (m == 1) {
                    const double xv = xi[0];
                    for (k = 0; k < i; k++)
                        X[k] -= li[k] * xv;
                } else {
                    for (k = 0; k < i; k++)
                        rt_laxpy(X + k * m, -li[k], xi, m);
                }
            }
        } else {
            for (i = 0; i < n; i++) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
                if (m == 1) {
                    const double xv = xi[0];
                    for (k = i + 1; k < n; k++)
                        X[k] -= li[k] * xv;
                } else {
                    for (k = i + 1; k < n; k++)
                        rt_laxpy(X + k * m, -li[k], xi, m);
                }
            }
        }
    }
}

static int tri_has_zero_diagonal(const double *L, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++)
        if (L[i * n + i] == 0.0)
            return 1;
    return 0;
}

#endif
