"""ArviZ diagnostics for revtape-powered draws: InferenceData, az.summary
(r_hat, ess) and a trace plot saved as PNG.

    python examples/eight_schools_arviz.py [trace.png]

The draws come from the littlemcmc example; any sampler's (chains, draws, dim)
array goes through the same ``to_inference_data``.
"""

import sys

import arviz as az
import matplotlib
matplotlib.use("Agg")       # write files; no display needed

import eight_schools as es
import eight_schools_littlemcmc


def to_inference_data(draws):
    """(chains, draws, es.DIM) on the sampling space -> InferenceData with
    mu, tau and eta on the model's own scale."""
    mu, tau = es.mu_tau(draws)
    return az.from_dict(posterior={"mu": mu, "tau": tau, "eta": draws[..., 2:]},
                        dims={"eta": ["school"]})


def run(png_path="eight_schools_trace.png", draws=1000, tune=1000, chains=4, seed=0):
    """Sample, print the summary, save the trace plot; returns (idata, summary)."""
    idata = to_inference_data(eight_schools_littlemcmc.sample(draws, tune, chains, seed))
    summary = az.summary(idata, var_names=["mu", "tau"])
    print(summary)
    axes = az.plot_trace(idata, var_names=["mu", "tau"])
    fig = axes.ravel()[0].figure
    fig.tight_layout()
    fig.savefig(png_path, dpi=80)
    print("trace plot written to", png_path)
    return idata, summary


if __name__ == "__main__":
    run(*sys.argv[1:2])
