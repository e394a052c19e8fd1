/* The general sweeps' dispatch (sweeps.c).  Internal to the extension.
 *
 * Lua-style dispatch macros.  With GCC/Clang the kernels are labels reached
 * by computed goto; gcc -O2 keeps one shared indirect jump per sweep (the
 * disassembly shows a single `jmp *`), it does not copy the dispatch into
 * every kernel.  Copying it by hand (decode and jump spelled out per
 * kernel) made rosenbrock-loop 8% and eight-schools 4.5% faster but logreg
 * 2.5% slower, so it is not in.  Elsewhere, or with -DRT_NO_COMPUTED_GOTO,
 * the same kernels sit in a switch.  Either way VM_NEXT jumps to `vm_next`,
 * which decodes the next instruction.  (The scalar path, scalar_path.c,
 * ends every handler in its own jump instead; it reads RT_COMPUTED_GOTO.)
 */
#ifndef REVTAPE_VM_DISPATCH_H
#define REVTAPE_VM_DISPATCH_H

#if defined(__GNUC__) && !defined(RT_NO_COMPUTED_GOTO)
#define RT_COMPUTED_GOTO 1
#define RT_LABEL_(name) &&L_##name,
#define VM_DISPATCH(op) goto *vm_labels[op];
#define VM_CASE(name) L_##name:
#else
#define RT_COMPUTED_GOTO 0
#define VM_DISPATCH(op) switch (op)
#define VM_CASE(name) case RT_OP_##name:
#endif
#define VM_NEXT goto vm_next

#endif
