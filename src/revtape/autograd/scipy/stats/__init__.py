"""scipy.stats's distributions as autograd.scipy.stats has them
(norm, t, gamma, beta, chi2, poisson, multivariate_normal, dirichlet), each
a module: logpdf/logpmf/logcdf/logsf are revtape's (rt.stats, scipy's
argument names), pdf/pmf/cdf/sf their exponentials."""

from . import beta, chi2, dirichlet, gamma, multivariate_normal, norm, poisson, t  # noqa: F401
