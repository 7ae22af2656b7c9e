"""Derivatives through SciPy's solvers by their mathematics (ODEs, quadrature, roots, optima, fits).

Rules here are ordinary rules in the one table (:mod:`tapegrad.registry`), reached
through SciPy's door (:mod:`tapegrad.interception`), which imports
``tapegrad.solvers.<module>`` the first time a tape records after the user imported
``scipy.<module>``.  This layer sits above :mod:`tapegrad.api`: a solver's rule
differentiates the user's callback with tapegrad's own ``grad``/``jacobian``.

Every rule is registered with ``route_all`` (parameters usually reach a solver
through a closure, where no argument shows them): SciPy runs on plain numbers with
the callbacks wrapped (:class:`~tapegrad.solvers._core.Callbacks`), and a call that
turns out to involve traced values gets the derivative of the solution by the
implicit function theorem on the equations the solution satisfies, as a few chord
steps evaluated on tracers (:mod:`tapegrad.solvers._core`):

* :mod:`tapegrad.solvers.optimize`: roots, minima (with bounds and constraints),
  least squares and fits, the legacy ``fmin_*`` interfaces, global minimizers;
* :mod:`tapegrad.solvers.integrate`: ``solve_ivp`` and ``odeint`` (Radau IIA
  collocation of the sensitivities on SciPy's own steps), ``solve_bvp``, ``quad``,
  ``quad_vec``, ``cubature``.

See ``docs/solvers.md`` for what is differentiated, how, and what the derivative means.
"""
