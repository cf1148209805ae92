"""The trajectory contract (docs/architecture.md, "The trajectory contract"): roles, endings, records, masks, validation."""

from tracerl.contract.masks import attention_mask, loss_mask
from tracerl.contract.roles import TRUNCATIONS, TerminalReason, TokenRole
from tracerl.contract.serialize import from_dict, to_dict
from tracerl.contract.trajectory import Span, Trajectory, ids_sha256
from tracerl.contract.validate import RULES, ContractError, validate

__all__ = [
    "RULES", "TRUNCATIONS", "ContractError", "Span", "TerminalReason", "TokenRole", "Trajectory",
    "attention_mask", "from_dict", "ids_sha256", "loss_mask", "to_dict", "validate",
]
