"""Lowering: a finished tape becomes a flat program of integer words.

compiler.py lays out the arena and emits the instruction words (dead-code
removal, folding, fusions; its scalar part runs in C, csrc/compile/);
blocks.py wraps elementwise runs into tiled blocks; wide.py derives the
batched (wide) form of scalar programs."""
