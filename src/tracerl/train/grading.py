"""The grader role: a learned judge (`roles.grader`) grading rollouts beside, or instead of, the env's verifier.

Applied to each round of rollouts right after they are generated, before group selection, so DAPO's
dynamic sampling and every advantage see the reward the policy is actually trained on. The judge
reads the task's question and everything after the prompt (the policy's turns and the tool
observations, decoded with the policy's tokenizer). Infra failures are not graded.

- `calibrate`: a `judge` component with weight 0 is added (the reward is unchanged) and the step's
  agreement with the deterministic verdict (`contract.is_success`) is logged as `grader/*`.
- `replace`: the reward becomes `weight × judge`; the env's components stay recorded with weight 0,
  and the trajectory names the judge as its verifier, so the chain of evidence says who rewarded it.
  Held-out evaluation keeps the env's deterministic verifier, so a judge that can be gamed shows up
  as training reward rising while held-out success does not.
"""

from __future__ import annotations

from tracerl.contract import TokenRole, Trajectory, is_success
from tracerl.errors import UserError
from tracerl.config.roles import GraderConfig
from tracerl.verifiers.calibration import calibration
from tracerl.verifiers.learned_grader import DEFAULT_PROMPT, LearnedGrader


def _question(task) -> str:
    p = task.prompt
    return p if isinstance(p, str) else "\n".join(m.get("content", "") for m in p if m.get("role") == "user")


def response_text(traj: Trajectory, tokenizer) -> str:
    """The episode after its prompt: policy turns and observations, as the policy's tokenizer reads them."""
    first = next((i for i, r in enumerate(traj.roles) if r == TokenRole.ACTION), len(traj.roles))
    return tokenizer.decode(traj.token_ids[first:], skip_special_tokens=True)


def audit_set(envs: list[str] | tuple[str, ...]) -> list[tuple[str, str, bool]]:
    """(question, response, is_good) from each environment's audit set (its turns joined)."""
    import json

    from tracerl.envs import get_env
    from tracerl.verifiers.audit import get_audit

    out = []
    for name in dict.fromkeys(envs):
        get_env(name)  # importing the environment registers its audit set
        try:
            _, cases = get_audit(name)
        except UserError:
            continue  # an environment without an audit set adds nothing
        for case in cases:
            try:
                turns = json.loads(case.output)
            except ValueError:
                turns = [case.output]
            response = "".join(turns) if isinstance(turns, list) else case.output
            out.append((_question(case.task) if hasattr(case.task, "prompt") else str(case.task), response,
                        bool(case.should_reward)))
    return out


def calibrate(grader: LearnedGrader, cfg: GraderConfig, envs) -> None:
    """Calibrate `grader` on the audit sets of `envs`: the threshold maximising balanced accuracy
    (unless `cfg.threshold` is set), AUROC, and the injection slice; the result is kept on the grader
    (and so in the manifest). Raises UserError naming the problem when the judge cannot separate."""
    cases = audit_set(envs)
    cal = grader.calibrate(cases, threshold=cfg.threshold, min_auroc=cfg.min_auroc,
                           min_balanced_accuracy=cfg.min_balanced_accuracy)
    if cal.problem and cfg.refuse_uncalibrated:
        raise UserError(f"roles.grader: the judge {cfg.judge_name} is refused: {cal.problem} ({cal.n_pos} good, "
                        f"{cal.n_neg} wrong and {cal.n_injected} injected audit outputs of {', '.join(envs)}); "
                        f"use a stronger judge or a task with a deterministic verifier.")


class GraderRole:
    def __init__(self, cfg: GraderConfig, grader: LearnedGrader):
        self.cfg, self.grader = cfg, grader
        self._pairs: list[tuple[bool, bool]] = []
        self._p_yes: list[float] = []
        self._cut = 0

    @classmethod
    def build(cls, cfg: GraderConfig | None, *, default_device: str = "cpu", envs: list[str] | tuple[str, ...] = (),
              placement=None, threads: int = 1) -> GraderRole | None:
        """The grader of `cfg` on `cfg.device` (null: `default_device`, the recipe's model.device), in this process
        or on a Ray actor of its own (`placement.where: ray`, placement/remote_roles.py `RemoteGrader`),
        calibrated on the audit sets of `envs` (see `calibrate`); a judge that fails it is refused."""
        if cfg is None:
            return None
        from tracerl.models.device import resolve_device

        if cfg.url is not None:  # a judge behind an OpenAI-compatible endpoint: no local model, no device
            from tracerl.verifiers.remote_judge import RemoteJudge

            grader = RemoteJudge(cfg.url, cfg.model, prompt=cfg.prompt or DEFAULT_PROMPT, threshold=cfg.threshold or 0.5,
                                 api_key_env=cfg.api_key_env)
            if envs:
                calibrate(grader, cfg, envs)
            return cls(cfg, grader)
        device = resolve_device(cfg.device, default=default_device,
                                what="roles.grader.device" if cfg.device else "model.device")
        options = dict(gguf_file=cfg.gguf_file, prompt=cfg.prompt or DEFAULT_PROMPT, threshold=cfg.threshold or 0.5,
                       max_response_tokens=cfg.max_response_tokens)
        remote = placement is not None and placement.where == "ray"
        try:
            if remote:
                from tracerl.placement.remote_roles import RemoteGrader

                grader = RemoteGrader(cfg.path, spec=placement, device=str(device), threads=threads, **options)
            else:
                grader = LearnedGrader.from_path(cfg.path, **options)
        except UserError as err:
            raise UserError(f"roles.grader.path: {err}".replace("set model.path", "set roles.grader.path")
                            .replace("set model.gguf_file", "set roles.grader.gguf_file")) from None
        except ValueError as err:
            raise UserError(f"roles.grader: {err}") from None
        if not remote:
            grader.model.to(device)
        if envs:
            calibrate(grader, cfg, envs)
        return cls(cfg, grader)

    def apply(self, trajs: list[Trajectory], tasks: list, tokenizer) -> None:
        """Grade `trajs` (aligned with their `tasks`) in place."""
        todo = [(t, task) for t, task in zip(trajs, tasks, strict=True) if t.trainable]
        verdicts = self.grader.grade([(_question(task), response_text(t, tokenizer)) for t, task in todo])
        for (t, _), v in zip(todo, verdicts):
            self._pairs.append((is_success(t), v.accept))
            self._p_yes.append(v.p_yes)
            self._cut += v.response_cut
            comps = {**{k: c for k, c in t.reward_components.items() if k != "judge"}, "judge": float(v.accept)}
            if self.cfg.mode == "replace":
                t.set_reward(comps, {"judge": self.cfg.weight})
                t.verifier_name, t.verifier_revision = self.grader.name, self.grader.revision
            else:
                t.set_reward(comps, {**t.reward_weights, "judge": 0.0})
            t.verifier_output = {**t.verifier_output, **v.raw(), "judge_prompt_sha256": self.grader.prompt_sha256}

    def metrics(self) -> dict[str, float]:
        """This step's `grader/*` figures (then reset)."""
        if not self._pairs:
            return {}
        c = calibration(self._pairs)
        keep = ("n", "agreement", "false_positive_rate", "false_negative_rate", "judge_accept_rate",
                "verifier_accept_rate")
        out = {f"grader/{k}": c[k] for k in keep if c[k] == c[k]}  # NaN (an empty class) is left out
        out["grader/p_yes_mean"] = sum(self._p_yes) / len(self._p_yes)
        out["grader/response_cut"] = float(self._cut)
        self._pairs, self._p_yes, self._cut = [], [], 0
        return out
