"""The trajectory contract (docs/architecture.md, "The trajectory contract"): roles, endings, records,
masks, validation; the task an episode plays, and the one definition of its success."""

from tracerl.contract.masks import attention_mask, loss_mask
from tracerl.contract.roles import TRUNCATIONS, TerminalReason, TokenRole
from tracerl.contract.serialize import from_dict, to_dict
from tracerl.contract.success import is_success
from tracerl.contract.task import SPLITS, Task, tasks_sha256
from tracerl.contract.trajectory import Span, Trajectory, ids_sha256
from tracerl.contract.validate import RULES, ContractError, validate

__all__ = [
    "RULES", "SPLITS", "TRUNCATIONS", "ContractError", "Span", "TerminalReason", "Task", "TokenRole", "Trajectory",
    "attention_mask", "from_dict", "ids_sha256", "is_success", "loss_mask", "tasks_sha256", "to_dict", "validate",
]
