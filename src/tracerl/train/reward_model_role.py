"""The reward-model role (`roles.reward_model`): a Bradley–Terry reward model scores every rollout.

Built before anything is written: the model is loaded and calibrated on the environments' audit sets
(good outputs, wrong ones, and the wrong ones again with the instructions of `calibration.INJECTIONS`
appended), on σ(r): AUROC, the threshold that maximises balanced accuracy (agreement with the
deterministic verifier) and the injection check, exactly the gate a judge passes
(`verifiers/calibration.calibrate_scores`). Below `min_auroc` or `min_balanced_accuracy`, or lifted
by an injection, it is refused in one sentence (exit 2) unless `refuse_uncalibrated: false`. The
calibration, the model's SHA-256 and its training record go into the manifest
(`verifier.reward_model`) and into the store (event `reward_model`).

Applied where the grader is, right after rollouts are generated and before selection: each trainable
rollout gets the component `reward_model` = σ(r(question, response)) with weight `weight`, beside the
env's own components (the reward is their weighted sum); `verifier_output["rm_score"]` keeps r.
Held-out evaluation keeps the env's verifier. Logged per step: `reward_model/score_mean` and
`reward_model/agreement` (σ(r) ≥ threshold against the verifier's success).
"""

from __future__ import annotations

import math

from tracerl.contract import Trajectory, is_success
from tracerl.errors import UserError
from tracerl.train.grading import _question, audit_set, response_text
from tracerl.verifiers.calibration import INJECTIONS, calibrate_scores, calibration


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class RewardModelScorer:
    """The loaded model, its calibration and what the manifest records of it."""

    name = "reward_model"

    def __init__(self, rm, meta: dict, path: str):
        self.rm, self.meta, self.path = rm, meta, path
        self.calibration = None
        self.agreement = float("nan")
        self.threshold = 0.5
        self.revision = meta["sha256"][:16]

    def scores(self, pairs: list[tuple[str, str]]) -> list[float]:
        return self.rm.score(pairs) if pairs else []

    def calibrate(self, cases, *, min_auroc: float, min_balanced_accuracy: float):
        cases = list(cases)
        wrong = [(q, r) for q, r, good in cases if not good]
        p = [_sigmoid(x) for x in self.scores([(q, r) for q, r, _ in cases])]
        injected = [_sigmoid(x) for x in self.scores([(q, r + inj) for q, r in wrong for inj in INJECTIONS])]
        cal = calibrate_scores([x for x, (_, _, g) in zip(p, cases) if g], [x for x, (_, _, g) in zip(p, cases) if not g],
                               injected, min_auroc=min_auroc, min_balanced_accuracy=min_balanced_accuracy)
        self.calibration, self.threshold = cal, cal.threshold
        self.agreement = calibration([(g, x >= cal.threshold) for x, (_, _, g) in zip(p, cases)])["agreement"]
        return cal

    def manifest(self) -> dict:
        train = {k: self.meta.get(k) for k in ("base", "data_sha256", "pairs", "epochs", "lr", "seed", "final_loss",
                                               "pair_accuracy")}
        out = {"name": self.name, "kind": self.meta.get("kind"), "path": self.path, "sha256": self.meta["sha256"],
               "revision": self.revision, "threshold": self.threshold, "train": train}
        if self.calibration is not None:
            out["calibration"] = {**self.calibration.record(), "agreement": self.agreement}
        return out


class RewardModelRole:
    manifest_key = "reward_model"  # verifier.reward_model in the manifest (run/manifest.py)

    def __init__(self, cfg, scorer: RewardModelScorer):
        self.cfg, self.grader = cfg, scorer  # `grader`: the attribute the manifest and the sources read
        self._scores: list[float] = []
        self._pairs: list[tuple[bool, bool]] = []

    @classmethod
    def build(cls, cfg, *, default_device: str = "cpu", envs=()) -> RewardModelRole | None:
        if cfg is None:
            return None
        from tracerl.models.device import resolve_device
        from tracerl.train.reward_model import load_reward_model

        device = resolve_device(cfg.device, default=default_device,
                                what="roles.reward_model.device" if cfg.device else "model.device")
        rm, meta = load_reward_model(cfg.path, device=device)
        scorer = RewardModelScorer(rm, meta, cfg.path)
        cases = audit_set(envs)
        cal = scorer.calibrate(cases, min_auroc=cfg.min_auroc, min_balanced_accuracy=cfg.min_balanced_accuracy)
        if cal.problem and cfg.refuse_uncalibrated:
            raise UserError(f"roles.reward_model: the reward model {cfg.path} is refused: {cal.problem} ({cal.n_pos} good, "
                            f"{cal.n_neg} wrong and {cal.n_injected} injected audit outputs of {', '.join(envs)}); "
                            "train it on more or better preference pairs, or set refuse_uncalibrated: false to use it "
                            "anyway")
        return cls(cfg, scorer)

    def apply(self, trajs: list[Trajectory], tasks: list, tokenizer) -> None:
        """Score `trajs` (aligned with their `tasks`) in place: the `reward_model` component beside the env's."""
        todo = [(t, task) for t, task in zip(trajs, tasks, strict=True) if t.trainable]
        raw = self.grader.scores([(_question(task), response_text(t, tokenizer)) for t, task in todo])
        for (t, _), r in zip(todo, raw):
            s = _sigmoid(r)
            self._scores.append(s)
            self._pairs.append((is_success(t), s >= self.grader.threshold))
            comps = {**{k: c for k, c in t.reward_components.items() if k != "reward_model"}, "reward_model": s}
            t.set_reward(comps, {**t.reward_weights, "reward_model": self.cfg.weight})
            t.verifier_output = {**t.verifier_output, "rm_score": float(r), "rm_revision": self.grader.revision}

    def metrics(self) -> dict[str, float]:
        if not self._scores:
            return {}
        out = {"reward_model/score_mean": sum(self._scores) / len(self._scores),
               "reward_model/agreement": calibration(self._pairs)["agreement"]}
        self._scores, self._pairs = [], []
        return out


__all__ = ["RewardModelRole", "RewardModelScorer"]
