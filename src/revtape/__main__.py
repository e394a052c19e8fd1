"""``python -m revtape`` / the ``revtape`` console script.

    python -m revtape bench [--quick] [--only NAME,...] [--peers none|all|jax,torch]
                            [--json PATH] [--plot PATH.png]
"""

import argparse
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="revtape", description="revtape: reverse-mode AD whose tapes compile to a C VM")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = sub.add_parser(
        "bench", help="benchmark revtape against hand-written references and installed peers",
        description="Verify, then time, value-and-gradient on the built-in workloads: revtape "
                    "compiled (value_and_gradient and bind), the reference replay, hand-written "
                    "numpy and C, and every installed peer (JAX, PyTorch, autograd, CasADi).")
    from .bench import cli   # argparse only; the heavy imports happen when a workload runs
    cli.add_arguments(bench)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "bench":
        return cli.run(args, argv)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
