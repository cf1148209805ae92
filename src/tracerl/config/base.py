"""The one base class of every recipe section: unknown keys refused, assignments validated, and each
field's docstring its description (what `tracerl config show` prints)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)
