"""Training: SFT, the RL update, checkpoints and resume, optimizer setup (docs/architecture.md).

The package itself is callable: `tracerl.train(recipe, **overrides)` runs a recipe end to end and
returns a `tracerl.api.Run` (tracerl/api.py). A function named `train` in `tracerl/__init__.py`
would be replaced by this package the first time any `tracerl.train.*` module is imported, so the
package answers the call instead.
"""

import sys as _sys
import types as _types


class _CallablePackage(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        from tracerl.api import train

        return train(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallablePackage
