#!/usr/bin/env python
"""Sanitizer fuzz of revtape's C VM: mutated and random programs under
AddressSanitizer + UndefinedBehaviorSanitizer.

    python tools/fuzz_vm.py                      # ~2 minutes: gcc (and clang if installed)
    python tools/fuzz_vm.py --runs 40 --iterations 20000 --compilers gcc

What it does:

1. compiles a set of small revtape tapes (every opcode family: elementwise,
   special functions, broadcasting gathers, matmul, reductions, selects,
   index maps, fused scalar chains, guards, Hessian and Jacobian programs)
   and writes their programs to a seeds file;
2. builds the VM's C sources (_build_vm.SOURCES) with tools/fuzz_vm_harness.c into a
   standalone executable with -fsanitize=address,undefined (once per
   compiler found: gcc, clang), cached in the build directory under a hash
   of the C files, flags and compiler version (the time budget counts
   fuzzing only);
3. runs it in chunks (one process per RNG seed): each iteration takes a seed
   program or makes a random one, mutates instruction words, index-table
   entries and header fields, calls rt_verify, and runs every entry point
   (rt_forward, rt_forward_report, rt_value_and_grad, rt_vjp, rt_jacobian,
   rt_jvp, rt_jacobian_fwd, rt_read_io, rt_batch_value_and_grad,
   rt_batch_forward, rt_batch_wide) on the programs it accepts, with
   buffers of exactly the sizes vm.h promises.  Refused programs must be
   refused by every entry point.

With ``--python``, it also builds revtape's cffi extension itself with the
sanitizers into build/fuzz_vm/py (a copy of src/revtape) and runs the tests
that feed crafted pickles, misaligned and strided arrays and concurrent
threads through the Python API (tests/runtime/test_compiled.py -k hardening
selection) under it, with libasan/libubsan preloaded into Python.

A sanitizer report aborts its chunk; the script prints it with the RNG seed
that reproduces it (``build/fuzz_vm/harness-gcc-<hash> SEEDS SEED ITERATIONS``) and
exits 1.  Not part of the test suite (it needs a C compiler with sanitizer
runtimes and minutes of CPU).
"""

import argparse
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def seed_programs():
    import numpy as np
    import revtape as rt
    try:
        import scipy.special as sps
    except ImportError:                                   # scipy is optional
        sps = None

    def guarded(x):
        a = x[0] * 2.0 if x[0] > 0.0 else -x[0]
        return a + (x[1] ** 2 if x[1] <= x[2] else x[2]) + np.sum(x ** 2)

    W = np.linspace(-1, 1, 12).reshape(4, 3)
    fns = [
        (lambda x: np.sum(np.exp(x) * np.sin(x) + np.log1p(x ** 2) / (2 + np.cos(x))), 4),
        (lambda x: np.sum(x.reshape(2, 2) * x[:2] + x[2] - x.reshape(2, 2).T), 4),
        (lambda x: np.sum(np.tanh(W @ x[:3])) + x[:3] @ x[:3] + np.sum(x[:4] @ W), 4),
        (lambda x: np.sum(np.max(x.reshape(2, 3), axis=0) * np.min(x.reshape(2, 3), axis=1,
                                                                    keepdims=True))
         + np.prod(x.reshape(3, 2), axis=1).sum(), 6),
        (lambda x: np.sum(np.where(x > 0, np.sqrt(np.abs(x)), x ** 3))
         + np.sum(np.clip(x, -0.5, 0.5)) + np.sum(np.maximum(x, 0.2)), 5),
        (lambda x: np.sum(x[::-1] * x[[0, 0, 2, 4, 4]]) + x[1] * x[-1]
         + np.sum(np.concatenate([x[:2], x[3:]]) ** 2), 5),
        (lambda x: sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4)), 5),
        (lambda x: np.sum(np.abs(x) ** x[0]) + np.sum((1 + x ** 2) ** 1.5) + 2.0 ** x[1], 3),
        (guarded, 3),
    ]
    if sps is not None:
        fns.append((lambda x: np.sum(sps.gammaln(np.exp(x)) + sps.digamma(2 + x ** 2)
                                     + sps.log_expit(x) + sps.erf(x)
                                     ) + np.sum(sps.logsumexp(x.reshape(2, 2), axis=0)), 4))
    # structural and linear-algebra ops, where this revtape has them
    A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]])
    for f, n in ((lambda x: np.sum(np.linalg.cholesky(A + np.diag(x ** 2)) * x[0]), 3),
                 (lambda x: np.sum(np.linalg.solve(A + np.diag(x ** 2), x)), 3),
                 (lambda x: np.sum(np.sort(x) * np.arange(4.0)) + np.sum(np.cumsum(x) ** 2), 4),
                 # array fusions: GAXPY, SSD, AXPY and SQDIFF over arrays
                 (lambda x: np.sum((np.arange(6.0) - (x[2:][[0, 1, 1, 0, 2, 2]]
                                                      + x[0] * np.arange(6.0))) ** 2)
                  + np.sum(np.arange(3.0) * (x[2:] + x[1] * x[2:]) ** 2)
                  + np.sum(np.arange(3.0) * (x[2:] - x[1:4]) ** 2), 5)):
        try:
            rt.GradientTape(f, np.linspace(0.2, 0.9, n))
        except (rt.RevtapeError, TypeError, ValueError):
            continue
        fns.append((f, n))
    progs = []
    for f, n in fns:
        x = np.linspace(0.2, 0.9, n)
        progs.append(rt.compile(rt.GradientTape(f, x)).program)
        try:
            progs.append(rt.compile(rt.HessianTape(f, x)).program)
        except rt.RevtapeError:
            pass
    progs.append(rt.compile(rt.JacobianTape(lambda x: np.exp(x) * x[0] + W @ x[:3], np.ones(4))).program)
    return progs


def write_seeds(path, progs):
    with open(path, "wb") as fh:
        fh.write(struct.pack("<q", len(progs)))
        for p in progs:
            code = p.code.astype("<i4").reshape(-1)
            fh.write(struct.pack("<8q", code.size // 6, p.ints.size, p.n_vals, p.n_in, p.n_grad,
                                 p.n_fixed, p.out_off, p.out_len))
            fh.write(code.tobytes())
            fh.write(p.ints.astype("<i4").tobytes())
            fh.write(p.consts.astype("<f8").tobytes())


def _build_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("_build_vm",
                                                  ROOT / "src" / "revtape" / "_build_vm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HARNESS = ROOT / "tools" / "fuzz_vm_harness.c"


def _flags():
    return ["-std=c99", "-O1", "-g", "-fno-omit-frame-pointer",
            "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-D_DEFAULT_SOURCE"]


def build(cc, bdir):
    """The sanitized harness for compiler cc, built once per content: the
    executable's name carries a hash of every C file it is made of (the VM's
    sources, the headers they include, the harness), the flags and the
    compiler's version, so a rebuild happens only when one of them changed.
    Returns (path, seconds spent building: 0 for a cached one)."""
    import hashlib
    sources = [str(_build_module().CSRC / s) for s in _build_module().SOURCES]
    harness = HARNESS
    h = hashlib.sha256()
    for f in sorted((ROOT / "csrc").rglob("*.[ch]")) + [harness]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    h.update(" ".join(_flags() + sources).encode() + version.encode())
    name = os.path.basename(cc)
    out = bdir / f"harness-{name}-{h.hexdigest()[:16]}"
    if out.exists():
        return out, 0.0
    for old in bdir.glob(f"harness-{name}-*"):       # stale builds of other sources
        old.unlink()
    t0 = time.monotonic()
    tmp = out.with_suffix(".tmp")
    cmd = [cc, *_flags(), f"-I{ROOT / 'csrc'}", *sources, str(harness), "-lm", "-o", str(tmp)]
    subprocess.run(cmd, check=True)
    os.replace(tmp, out)                           # a killed build leaves no half executable
    return out, time.monotonic() - t0


PY_TESTS = ("pickle or misaligned or strided or pointer_cache or threads_sharing or own_thread "
            "or refused or fuzz or verifier or guard_location or absurd or half_written "
            "or program_after or callback or batch or pivots")


def python_under_sanitizers(bdir, cc="gcc"):
    """Build revtape._vm with ASan+UBSan and run the Python-level hardening
    tests against it; returns (exit code, last lines of output)."""
    mod = _build_module()
    pkg = bdir / "py"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(ROOT / "src" / "revtape", pkg / "revtape",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    # the package's own cffi builder (same declarations), with absolute paths
    # and sanitizer flags instead of its release flags
    ffi = mod.ffibuilder
    name, source, ext, kwds = ffi._assigned_source
    flags = ["-O1", "-g", "-std=c99", "-fno-omit-frame-pointer", "-D_DEFAULT_SOURCE",
             "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    ffi._assigned_source = (name, source, ext, dict(
        kwds, sources=[str(mod.CSRC / s) for s in mod.SOURCES], include_dirs=[str(mod.CSRC)],
        extra_compile_args=flags, extra_link_args=["-fsanitize=address,undefined"]))
    ffi.compile(tmpdir=str(pkg), verbose=False)
    preload = [subprocess.run([cc, f"-print-file-name={lib}"], capture_output=True,
                              text=True).stdout.strip() for lib in ("libasan.so", "libubsan.so")]
    env = dict(os.environ, PYTHONPATH=str(pkg), LD_PRELOAD=" ".join(preload),
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    r = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tests" / "runtime" / "test_compiled.py"),
                        "-q", "-p", "no:cacheprovider", "-k", PY_TESTS],
                       capture_output=True, text=True, env=env, cwd=str(bdir))
    return r.returncode, (r.stdout + r.stderr)[-3000:]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=12, help="processes (RNG seeds) per compiler")
    ap.add_argument("--iterations", type=int, default=10000, help="programs per process")
    ap.add_argument("--seed", type=int, default=1, help="first RNG seed")
    ap.add_argument("--compilers", default="gcc,clang",
                    help="comma-separated; those not installed are skipped")
    ap.add_argument("--budget", type=float, default=240.0,
                    help="stop starting new runs after this many seconds")
    ap.add_argument("--build-dir", default=str(ROOT / "build" / "fuzz_vm"))
    ap.add_argument("--python", action="store_true",
                    help="also run the Python-level hardening tests on a sanitized extension")
    args = ap.parse_args(argv)

    bdir = pathlib.Path(args.build_dir)
    bdir.mkdir(parents=True, exist_ok=True)
    seeds = bdir / "seeds.bin"
    progs = seed_programs()
    write_seeds(seeds, progs)
    print(f"{len(progs)} seed programs -> {seeds}")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    # the builds come first and outside the budget: the budget is fuzzing time
    exes = {}
    for cc in args.compilers.split(","):
        if shutil.which(cc) is None:
            print(f"{cc}: not installed, skipped")
            continue
        exes[cc], secs = build(cc, bdir)
        print(f"{cc}: {exes[cc].name} " + (f"built in {secs:.0f} s" if secs else "(cached)"))
    start = time.monotonic()
    totals, findings = {}, []
    for cc, exe in exes.items():
        tot = totals.setdefault(cc, {"runs": 0, "iterations": 0, "random_programs": 0,
                                     "verified": 0, "refused": 0, "verifier_only": 0,
                                     "calls": {}})
        for k in range(args.runs):
            if time.monotonic() - start > args.budget:
                print(f"time budget of {args.budget:.0f} s reached")
                break
            seed = args.seed + k
            r = subprocess.run([str(exe), str(seeds), str(seed), str(args.iterations)],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                findings.append((cc, seed, r.stderr[-4000:]))
                print(f"{cc} seed {seed}: FAILED (exit {r.returncode})\n{r.stderr[-4000:]}")
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            tot["runs"] += 1
            for key in ("iterations", "random_programs", "verified", "refused", "verifier_only"):
                tot[key] += res[key]
            for name, c in res["calls"].items():
                acc = tot["calls"].setdefault(name, [0] * 8)
                tot["calls"][name] = [a + b for a, b in zip(acc, c)]
    print(f"elapsed {time.monotonic() - start:.0f} s")
    status = ["ok", "guard_failed", "busy", "unverified", "badarg", "nonfinite",
              "callback_failed", "other"]
    for cc, tot in totals.items():
        print(f"== {cc}: {tot['runs']} runs, {tot['iterations']} programs "
              f"({tot['random_programs']} random), verified {tot['verified']}, refused "
              f"{tot['refused']} (+{tot['verifier_only']} refused without an arena)")
        for name, c in tot["calls"].items():
            print(f"   {name:16s} " + ", ".join(f"{s} {v}" for s, v in zip(status, c) if v))
    if args.python:
        code, tail = python_under_sanitizers(bdir)
        print(f"== python tests under ASan+UBSan: exit {code}\n{tail.strip().splitlines()[-1]}")
        if code != 0:
            findings.append(("python", None, tail))
            print(tail)
    programs = sum(tot["iterations"] for tot in totals.values())
    print(f"programs run: {programs}")
    print(f"sanitizer findings: {len(findings)}")
    if programs == 0:
        # no finding is no evidence when nothing ran (no compiler, a budget
        # spent elsewhere, every chunk refused to start)
        print("FAILED: no program was fuzzed")
        return 1
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
