"""Function transforms on top of tapes.

api.py: the one-shot rt.gradient, rt.jacobian, rt.hessian, rt.hvp;
grad.py: rt.grad / rt.value_and_grad (record once, replay compiled,
re-record when stale); cached.py: rt.jacobian(f), rt.hessian(f),
rt.hvp(f), rt.jvp, rt.vjp; functional.py: their shared helpers;
draws.py: fresh random draws at each replay."""
