"""Pure functions over tensors: advantage estimators, policy/value losses, KL estimators, corrections,
entropy controllers and selection rules, each registered by name (see `registry`).

Import the submodules you need (`tracerl.algorithms.advantages`, `.losses`, ...); this package file
stays light so importing one estimator does not import them all. Depends only on torch and numpy.
"""
