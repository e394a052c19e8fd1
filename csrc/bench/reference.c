/* Hand-written value-and-gradient reference implementations; see reference.h
 * and src/revtape/bench/workloads.py for the workload definitions. */
#include <math.h>
#include <stdint.h>

#include "reference.h"

double ref_eight_schools_vg(const double *x, double *g)
{
    static const double y[8] = {28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0};
    static const double sigma[8] = {15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0};
    const double mu = x[0], log_tau = x[1];
    const double tau = exp(log_tau);
    const double m5 = mu / 5.0, t5 = tau / 5.0, t52 = t5 * t5;
    double lp = -0.5 * m5 * m5 + log_tau - log1p(t52);
    double g_mu = -m5 / 5.0;
    double g_lt = 1.0 - 2.0 * t52 / (1.0 + t52);
    for (int j = 0; j < 8; j++) {
        const double eta = x[2 + j];
        const double r = (y[j] - (mu + tau * eta)) / sigma[j];
        const double rs = r / sigma[j];          /* -d(-0.5 r^2)/d(theta_j) */
        lp += -0.5 * eta * eta - 0.5 * r * r;
        g_mu += rs;
        g_lt += rs * tau * eta;
        g[2 + j] = -eta + rs * tau;
    }
    g[0] = g_mu;
    g[1] = g_lt;
    return lp;
}

void ref_eight_schools_batch(const double *X, int64_t k, double *values, double *G)
{
    for (int64_t r = 0; r < k; r++)
        values[r] = ref_eight_schools_vg(X + 10 * r, G + 10 * r);
}

double ref_rosenbrock_vg(const double *x, double *g, int64_t n)
{
    double s = 0.0;
    if (n <= 0)
        return 0.0;
    g[0] = 0.0;
    for (int64_t i = 0; i < n - 1; i++) {
        const double xi = x[i];
        const double a = x[i + 1] - xi * xi;
        const double b = 1.0 - xi;
        s += 100.0 * a * a + b * b;
        g[i] += -400.0 * xi * a - 2.0 * b;
        g[i + 1] = 200.0 * a;
    }
    return s;
}

double ref_logreg_vg(const double *beta, double *g, const double *X, const double *y,
                     int64_t N, int64_t D)
{
    double lp = 0.0, prior = 0.0;
    for (int64_t j = 0; j < D; j++) {
        g[j] = -beta[j];
        prior += beta[j] * beta[j];
    }
    for (int64_t i = 0; i < N; i++) {
        const double *xi = X + i * D;
        double eta = 0.0;
        for (int64_t j = 0; j < D; j++)
            eta += xi[j] * beta[j];
        /* softplus(eta) = log(1 + exp(eta)) = max(eta, 0) + log1p(exp(-|eta|)) */
        const double e = exp(-fabs(eta));
        const double softplus = (eta > 0.0 ? eta : 0.0) + log1p(e);
        const double p = eta >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);  /* expit(eta) */
        const double r = y[i] - p;
        lp += y[i] * eta - softplus;
        for (int64_t j = 0; j < D; j++)
            g[j] += r * xi[j];
    }
    return lp - 0.5 * prior;
}

double ref_student_t_vg(const double *x, double *g, const double *X, const double *y,
                        int64_t N, int64_t D, double nu)
{
    const double sigma = x[D], inv_s = 1.0 / sigma, c = -0.5 * (nu + 1.0);
    const double k = 2.0 * c / nu;
    double lp = 0.0, wz = 0.0, bb = 0.0;
    int64_t i, j;
    for (j = 0; j < D; j++)
        g[j] = 0.0;
    for (i = 0; i < N; i++) {
        const double *xi = X + i * D;
        double eta = 0.0;
        for (j = 0; j < D; j++)
            eta += xi[j] * x[j];
        const double z = (y[i] - eta) * inv_s;
        const double u = z * z / nu;
        const double w = k * z / (1.0 + u);         /* d lp / d z */
        lp += log1p(u);
        wz += w * z;
        const double gw = -w * inv_s;               /* d lp / d eta */
        for (j = 0; j < D; j++)
            g[j] += gw * xi[j];
    }
    for (j = 0; j < D; j++) {
        g[j] -= x[j] / 25.0;
        bb += x[j] * x[j];
    }
    g[D] = -wz * inv_s - (double)N * inv_s - sigma;
    return c * lp - (double)N * log(sigma) - 0.5 * bb / 25.0 - 0.5 * sigma * sigma;
}

double ref_chain_vg(const double *x, double *g, int64_t L, double *work)
{
    double y = x[0];
    for (int64_t k = 0; k < L; k++) {
        work[k] = y;
        y = y + 0.001 * sin(y + 0.1 * (double)k);
    }
    /* reverse sweep: ybar_k = ybar_{k+1} * (1 + 0.001*cos(y_k + 0.1*k)) */
    double ybar = 1.0;
    for (int64_t k = L - 1; k >= 0; k--)
        ybar += ybar * 0.001 * cos(work[k] + 0.1 * (double)k);
    g[0] = ybar;
    return y;
}

double ref_radon_vg(const double *x, double *g, const double *y, const int64_t *county,
                    const double *floor_, int64_t N, int64_t J, double cnst)
{
    const double mu_a = x[0], beta = x[1], log_sa = x[2], log_sy = x[3];
    const double *a = x + 4;
    const double sa = exp(log_sa), sy = exp(log_sy);
    const double isa2 = 1.0 / (sa * sa), isy2 = 1.0 / (sy * sy);
    double *ga = g + 4;
    double rr = 0.0, dd = 0.0, dsum = 0.0, gbeta = 0.0;
    int64_t i, j;
    for (j = 0; j < J; j++)
        ga[j] = 0.0;
    /* one pass over the houses: residual, its square, and the scatter of
     * its adjoint r / sigma_y^2 into the county intercepts */
    for (i = 0; i < N; i++) {
        const double r = y[i] - a[county[i]] - beta * floor_[i];
        rr += r * r;
        ga[county[i]] += r;
        gbeta += r * floor_[i];
    }
    for (j = 0; j < J; j++) {
        const double d = a[j] - mu_a;
        dd += d * d;
        dsum += d;
        ga[j] = ga[j] * isy2 - d * isa2;
    }
    g[0] = dsum * isa2 - mu_a / 100.0;
    g[1] = gbeta * isy2 - beta / 100.0;
    g[2] = dd * isa2 - (double)J - (sa / 5.0) * (sa / 5.0) + 1.0;
    g[3] = rr * isy2 - (double)N - (sy / 5.0) * (sy / 5.0) + 1.0;
    return -0.5 * rr * isy2 - (double)N * log_sy - 0.5 * dd * isa2 - (double)J * log_sa
           - 0.5 * (mu_a / 10.0) * (mu_a / 10.0) - 0.5 * (beta / 10.0) * (beta / 10.0)
           - 0.5 * (sa / 5.0) * (sa / 5.0) + log_sa - 0.5 * (sy / 5.0) * (sy / 5.0) + log_sy
           + cnst;
}
