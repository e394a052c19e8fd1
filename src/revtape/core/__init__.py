"""The op table and what is generated from it.

ops.py is the single source of truth: one row per operation (name, arity,
numpy forward, derivative rules, C expression).  isa.py derives the VM's
instruction set from it and codegen.py writes csrc/generated/ops_generated.h;
specfun.py and cspecial.py are the special-function forwards used without
scipy; pytree.py and primitives.py are the two extension points every layer
above reads (structured inputs, user-defined primitives); apitypes.py holds the
types the public API is annotated with."""
