"""Derivatives through SciPy's solvers by their mathematics (ODEs, quadrature, roots, optima, fits).

Rules here are ordinary rules in the one table (:mod:`tapegrad.registry`), reached
through SciPy's door (:mod:`tapegrad.interception`), which imports
``tapegrad.solvers.<module>`` the first time a tape records after the user imported
``scipy.<module>``.  This layer sits above :mod:`tapegrad.api`: a solver's rule
differentiates the user's callback with tapegrad's own ``vjp``/``jvp``.
"""
