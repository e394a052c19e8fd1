"""CompiledTape's hand-off to the native tier (native.py, docs/guide/native.md).

native=True builds native code at construction; native="auto" starts on the
VM, which counts the tape's calls and replay time in C and reports the call
that makes it hot (RT_OK_HOT, or the hot callbacks below for the replays
that C calls alone: checked.c's State and Bound, the one-call bind); the
build then runs in the background and switches the program over atomically
(rt_set_native).  A first tangent sweep asks for native code with a tangent
sweep (native.add_tangent)."""

from .vm import ffi


class NativeHandoff:
    """CompiledTape's native-tier state (a mixin of compiled.CompiledTape)."""

    def _start_native(self, native):
        """The native tier for native=False, True or "auto" (checked by the caller)."""
        # The native tier (native.py, docs/guide/native.md): True builds it
        # now; "auto" starts on the VM and switches when the tape is hot.
        self._native = native
        self._native_state = "off"
        self._native_path = None
        self.native_compile_seconds = 0.0
        if native is True:
            from . import native as _native
            _native.attach(self)
        elif native == "auto":
            from . import native as _native
            _native.arm(self)

    @property
    def native_state(self) -> str:
        """Which code replays value_and_gradient, gradient and forward: "off" (the
        VM: native=False, REVTAPE_NATIVE=0, or a program the native tier does not
        take), "vm" (native="auto", not hot yet), "compiling" (hot: building in
        the background), "native", or "failed" (the build failed: the VM serves,
        with one NativeWarning)."""
        return self._native_state

    def wait_native(self, timeout: float | None = None) -> bool:
        """Wait until a native="auto" build started by this tape's hotness has
        finished (or timeout seconds); True when native code is serving."""
        ev = self.__dict__.get("_native_event")
        if ev is not None and self._native_state == "compiling":
            ev.wait(timeout)
        return self._native_state == "native"

    def _note_tangent(self):
        """The first tangent sweep asked of this tape: native="auto" builds
        native code with a tangent sweep from now on (native.add_tangent)."""
        self._tangent_used = True
        if self._native_state == "native":
            from . import native as _native
            _native.add_tangent(self)


def _hot_of(ref):
    """checked.c's on_hot: the native build of the CompiledTape behind a weak
    reference (the State, which the tape holds, must not hold the tape)."""
    def on_hot():
        ct = ref()
        if ct is not None:
            from . import native as _native
            _native.hot(ct)
    return on_hot


def _bind_hot(ct):
    """A C bound call's replay crossed native="auto"'s budget: queue the native
    build (as rt_py_hot: the VM keeps serving whatever happens)."""
    try:
        from . import native as _native
        _native.hot(ct)
    except Exception:            # noqa: BLE001 - the replay succeeded; it is returned
        pass


@ffi.def_extern()
def rt_py_hot(ctx):
    """A one-call bind crossed native="auto"'s budget: queue the native build."""
    try:
        from . import native as _native
        _native.hot(ffi.from_handle(ctx))
    except BaseException:        # noqa: BLE001 - C called us; the VM keeps serving
        pass
