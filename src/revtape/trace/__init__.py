"""Tracing: tracked values record operations onto a tape.

values.py (plain-value helpers) -> tape.py (Tape, NULL_TAPE, instruction
records; instrstore.py packs long tapes) -> tracked.py (TrackedReal,
TrackedArray and their operators) -> replay.py (the reference replay in
numpy) with guards.py (recorded branches); recording.py records a whole
function, hessian.py the tape of a gradient, watch.py what a recording run
touched."""
