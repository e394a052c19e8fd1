"""scipy, imported only when revtape first needs it.

scipy is optional, and importing it costs several times what importing
numpy does; `import revtape` therefore never imports it.  Two things need
scipy later, and this module serves both:

* a scipy-backed row's numpy forward (gammaln, solve_triangular, ...) calls
  scipy's own function when scipy is installed: ``special()`` and
  ``linalg()`` import the module at that first call (None without scipy);
* routing scipy's Python functions to revtape's on tracked arguments
  (numpy_api/scipy_dispatch.py) must happen before the user's code looks
  them up: ``when_imported(name, hook)`` runs the hook at once when the
  module is already imported, else right after the user's program imports
  it (a finder on sys.meta_path that wraps the module's loader; it steps
  aside once every hook it carries has run).
"""

import importlib
import importlib.abc
import sys
import threading

_imported = {}
_hooks = {}          # module name -> [hook(module), ...] still to run
_lock = threading.RLock()


def _load(name):
    mod = _imported.get(name)
    if mod is None and name not in _imported:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            mod = None
        _imported[name] = mod
    return mod


def special():
    """scipy.special (imported now if need be), or None without scipy."""
    return _load("scipy.special")


def linalg():
    """scipy.linalg (imported now if need be), or None without scipy."""
    return _load("scipy.linalg")


def loaded(name):
    """The module if the program has imported it already, else None (never imports)."""
    return sys.modules.get(name)


def when_imported(name, hook):
    """Run hook(module) once `name` is imported: now if it is, else after its import."""
    with _lock:
        mod = sys.modules.get(name)
        if mod is None:
            _hooks.setdefault(name, []).append(hook)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    hook(mod)


def _run_hooks(name, mod):
    with _lock:
        hooks = _hooks.pop(name, [])
        if not _hooks and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
    for hook in hooks:
        hook(mod)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the hooks waiting for it."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _run_hooks(module.__name__, module)

    def __getattr__(self, attr):          # get_resource_reader, is_package, ...
        return getattr(self._inner, attr)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders and wraps the loader of a
    module that has hooks waiting."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_FINDER = _Finder()
