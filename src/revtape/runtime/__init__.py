"""Runtime: a program replayed by the C VM or by native code.

compiled.py holds CompiledTape (the C program, its workspaces, copies,
pickles, bound calls, batches); native.py translates hot programs to C and
loads the result."""
