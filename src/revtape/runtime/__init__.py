"""Runtime: a program replayed by the C VM or by native code.

compiled.py holds CompiledTape (the C program and its arenas, copies,
pickles), made of the modules beside it: vm.py (the C extension), checks.py
and arena.py (loading a program), plumbing.py, replay.py and sweeps.py (the
replays), batch.py (batches), bound.py (bound calls), handoff.py (the native
tier's side of it) and compiled_hessian.py; native.py translates hot
programs to C and loads the result."""
