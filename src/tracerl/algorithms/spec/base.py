"""`Algorithm`: the typed spec an RL step is built from; the trainer never branches on its name.

An algorithm declares
- the model roles it needs (`roles`) and the per-token tensors the trainer must compute for it before
  the update, without gradient (`needs`: reference log-probs, proximal log-probs, values, ...);
- its batch selection: rollouts per task and which of them form the group (`rollouts_per_task`,
  `select_group`; DAPO dynamic sampling is the sampler's `next_groups`, switched on by `dynamic_sampling`);
- its reward shaping (`shape_rewards`: soft overlong penalty, group length control);
- its advantage (`advantages`, token-level `adv_BT`; an outcome estimator broadcasts `adv_B`);
- its loss terms (`loss`: surrogate variant, KL estimator and coefficient, entropy bonus, NLL).

Subclasses set `name` and override `outcome_advantage` (critic-free estimators) or `advantages`
(token-level credit). Every formula is a registered pure function of `tracerl.algorithms`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field, model_validator

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.entropy_control import MagicEntropyController, entropy_bonus
from tracerl.algorithms.losses import clip_cov, decoupled_ppo, kl_cov, kl_loss, mis, policy_loss, positive_nll, tis
from tracerl.algorithms.losses.decoupled import behavior_correction
from tracerl.algorithms.losses.aggregate import masked_mean
from tracerl.algorithms.rewards import length_bonus, overlong_penalty
from tracerl.algorithms.selection import resample_on_correct, roc_penalty
from tracerl.algorithms.spec.terms import KL, MIS, NLL, TIS, ClipCov, Decoupled, Entropy, KLCov, LengthControl, Overlong, Part, RoC
from tracerl.contract import TerminalReason, Trajectory


@dataclasses.dataclass
class PolicyOutput:
    """The current policy's scores of a minibatch, with gradient (`[B, T]`, 0 off the action tokens)."""

    logprobs_BT: torch.Tensor  # under the processed sampling distribution (the PPO ratio's numerator)
    full_logprobs_BT: torch.Tensor  # under the tempered full softmax (what a KL to another model compares)
    entropy_BT: torch.Tensor | None  # of the processed sampling distribution
    # `[B, T, K]`, when the algorithm asked for a support (`Algorithm.support_ids`): log-probs of K tokens per
    # position under the tempered full softmax, and those tokens' ids
    support_logprobs_BTK: torch.Tensor | None = None
    support_ids_BTK: torch.Tensor | None = None


@dataclasses.dataclass
class StepContext:
    """What one RL step gives the loss besides the batch."""

    max_tokens: int  # the episode budget L_max (fixed aggregation, overlong penalty)
    max_tokens_B: torch.Tensor | None = None  # each row's own L_max (envs: runs: its environment's), overlong penalty
    entropy_coef: float = 0.0  # α of this step (constant or from MAGIC)
    generator: torch.Generator | None = None  # Clip-Cov's random token choice
    step: int = 0  # the RL step (auxiliary roles' pretraining counts it)


class AlgorithmState:
    """Mutable run-time state of an algorithm (the entropy controller, a random stream); checkpointed."""

    def __init__(self, spec: Algorithm, seed: int):
        m = spec.entropy.magic
        self.controller = MagicEntropyController(m.target, m.delta, m.init, m.floor) if m is not None else None
        self.generator = torch.Generator().manual_seed(seed)

    def entropy_coef(self, spec: Algorithm, rollout_entropy: float) -> float:
        """α for this step; MAGIC advances its coefficient from the rollout entropy."""
        return self.controller.step(rollout_entropy) if self.controller is not None else spec.entropy.coef

    def state_dict(self) -> dict:
        return {"controller": self.controller.state_dict() if self.controller else None,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        if self.controller is not None and state.get("controller"):
            self.controller.load_state_dict(state["controller"])
        self.generator.set_state(state["generator"])


def episode_features(t: Trajectory) -> dict[str, float]:
    """Counts RoC's penalty and length control read from a trajectory's spans."""
    calls = [s for s in t.spans if s.tool_status is not None]
    actions = [s for s in t.spans if s.kind == "action"]
    last = actions[-1].end - actions[-1].start if actions else 0
    return {"tool_calls": float(len(calls)), "tool_errors": float(sum(s.tool_status != "ok" for s in calls)),
            # the agent loop records a verifier output exactly when the environment ended the episode on an answer
            "answers": float(bool(t.verifier_output) and t.terminal_reason != TerminalReason.INFRA_FAILURE),
            "turns": float(len(actions)), "answer_len": float(last), "think_len": float(t.num_action_tokens - last)}


class Algorithm(Part):
    """Fields shared by every policy-gradient algorithm; a subclass adds its estimator's own."""

    name: str
    clip_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip ε_low of the importance ratio."""
    clip_high: float = Field(0.28, ge=0)
    """Upper clip ε_high (clip-higher when above ε_low: DAPO)."""
    dual_clip: float | None = Field(None, gt=1)
    """Dual-clip constant c > 1 for negative advantages (Ye et al. 2020); null disables."""
    aggregation: Literal["token", "sequence", "fixed"] = "token"
    """Loss aggregation: token-global (DAPO), per-sequence mean (GRPO), or fixed B·L_max (Dr.GRPO)."""
    clip_cov: ClipCov | None = None
    """Clip-Cov surrogate variant; null for plain clipping."""
    kl_cov: KLCov | None = None
    """KL-Cov surrogate variant; null for plain clipping."""
    decoupled: Decoupled | None = None
    """Decoupled PPO: clip around the proximal policy, times π_prox/π_behavior; null clips around behavior."""
    kl: KL = Field(default_factory=KL)
    """KL penalty to the reference policy."""
    entropy: Entropy = Field(default_factory=Entropy)
    """Entropy bonus (constant or MAGIC-controlled)."""
    correction: TIS | MIS | None = Field(None, discriminator="kind")
    """Training–inference importance correction against the learner's proximal log-probs; null for none."""
    overlong: Overlong | None = None
    """DAPO soft overlong penalty added to the reward; null for none."""
    length_control: LengthControl | None = None
    """Group-relative length bonus added to the reward; null for none."""
    roc: RoC | None = None
    """Resample-on-correct group selection; null keeps every rollout."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: keep drawing groups until the batch holds `prompts_per_step` groups with reward
    variance (rounds and padding from `tasks.sampler.dynamic`)."""
    nll: NLL | None = None
    """Positive-example NLL term; null for none."""

    @model_validator(mode="after")
    def _one_variant(self) -> Algorithm:
        chosen = [n for n in ("clip_cov", "kl_cov") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise ValueError(f"choose at most one surrogate variant, got {' and '.join(chosen)}")
        if chosen and self.dual_clip is not None:
            raise ValueError(f"dual_clip does not combine with {chosen[0]}")
        return self

    # -- declarations -------------------------------------------------------------------------
    def roles(self) -> set[str]:
        """Model roles the trainer must host for this algorithm."""
        return {"policy"} | ({"reference"} if self.kl.coef > 0 else set())

    def needs(self) -> set[str]:
        """Per-token tensors computed without gradient before the update (names of `Scores`)."""
        out = {"reference"} if self.kl.coef > 0 else set()
        if self.decoupled is not None or self.correction is not None:
            out.add("proximal")
        return out

    def trained_roles(self) -> dict[str, str]:
        """Auxiliary roles the update trains, each with its phase: `before` the advantages are computed
        (PRIME's PRM) or `after` (a critic, whose old values the advantages use); see `role_loss`."""
        return {}

    def role_loss(self, role: str, mb: Batch, out: torch.Tensor, scores: dict[str, torch.Tensor],
                  rewards_B: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The minibatch loss of trained role `role` from its forward `out` (with gradient), and its stats:
        scalars (averaged over the minibatches) and per-row tensors under `row/<name>` (see `summarises`)."""
        raise TypeError(f"algorithm {self.name!r} trains no {role!r} role")

    def role_rows(self, role: str, batch: Batch, rewards_B: torch.Tensor) -> torch.Tensor | None:
        """The rows (bool [B]) trained role `role` trains on, among those the policy may train on; None: all."""
        return None

    def summarises(self, role: str) -> bool:
        """True: before trained role `role` takes its steps, the update runs `role_loss` without gradient over
        every eligible row (the role as it enters the step, on rollouts it has not trained on) and logs
        `role_summary` of the per-row stats."""
        return False

    def role_summary(self, role: str, rows: dict[str, torch.Tensor]) -> dict[str, float]:
        """Stats of trained role `role` from the per-row tensors of that pass (`rows[<x>]` for `row/<x>`)."""
        return {}

    @property
    def teacher_support(self) -> int:
        """K > 0: each teacher also scores its K most likely tokens at every ACTION position
        (`teacher/<name>@support_lp`, `@support_ids` in the scores); 0: only the sampled tokens."""
        return 0

    def support_ids(self, scores: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Token ids (`[B, T, K]`) at which the policy also scores a minibatch, with gradient
        (`PolicyOutput.support_logprobs_BTK`); None: only the sampled tokens."""
        return None

    @property
    def weighs_rows(self) -> bool:
        """True when the loss scales each row by its loss weight (`Batch.weight_B`), so per-row reweighting
        (e.g. `mixture.loss_share: episodes`) changes it; false for a loss that counts kept tokens instead."""
        return True

    @property
    def every_row(self) -> bool:
        """True when rows with zero advantage still move the loss (KL, entropy, NLL, KL-Cov terms)."""
        return self.kl.coef > 0 or self.entropy.active or self.nll is not None or self.kl_cov is not None

    @property
    def uses_entropy(self) -> bool:
        return self.entropy.active

    # -- selection and rewards -----------------------------------------------------------------
    def rollouts_per_task(self, group_size: int) -> int:
        return group_size * (self.roc.oversample if self.roc is not None else 1)

    def select_group(self, trajs: Sequence[Trajectory], group_size: int,
                     generator: torch.Generator) -> tuple[list[int], dict[str, float]]:
        """Indices of the rollouts that form the group (all of them unless RoC is on) and what was dropped."""
        if self.roc is None:
            return list(range(len(trajs))), {}
        f = [episode_features(t) for t in trajs]
        col = lambda k: torch.tensor([x[k] for x in f])  # noqa: E731
        correct = torch.tensor([t.reward > 0 for t in trajs])
        penalties = roc_penalty(col("tool_calls"), col("tool_errors"), col("answers"), col("turns"))
        kept, rep = resample_on_correct(correct, penalties, [0] * len(trajs), group_size=group_size,
                                        smoothing=self.roc.smoothing, generator=generator)
        dropped_pos = int(correct.sum()) - int(correct[kept].sum())
        return kept.tolist(), {"roc/dropped": float(rep["dropped"]), "roc/dropped_positive": float(dropped_pos),
                               "roc/kept_positive_frac": rep["kept_positive_frac"],
                               "roc/kept_penalty_mean": rep["kept_penalty_mean"],
                               "roc/candidate_penalty_mean": rep["candidate_penalty_mean"]}

    def shape_rewards(self, batch: Batch, trajs: Sequence[Trajectory], ctx: StepContext) -> tuple[torch.Tensor, dict]:
        """The rewards advantages are computed from: the batch's, plus the shaping terms switched on."""
        reward, stats = batch.reward_B.clone(), {}
        if self.overlong is not None:
            L = ctx.max_tokens if ctx.max_tokens_B is None else ctx.max_tokens_B
            pen = self.overlong.coef * overlong_penalty(batch.length_B, max_len=L,
                                                        cache_len=(min(self.overlong.cache_len, L) if isinstance(L, int)
                                                                   else L.clamp(max=self.overlong.cache_len)))
            pen = torch.where(batch.baseline_B, pen.to(reward.dtype), torch.zeros_like(reward))
            reward = reward + pen
            stats |= {"reward/overlong_penalty": float(pen.mean()), "reward/overlong_frac": float((pen < 0).float().mean())}
        if self.length_control is not None:
            lc, f = self.length_control, [episode_features(t) for t in trajs]
            shaped, st = length_bonus(reward, torch.tensor([x["think_len"] for x in f]),
                                      torch.tensor([x["answer_len"] for x in f]), batch.group_B,
                                      lam_think=lc.lam_think, lam_answer=lc.lam_answer)
            gate = batch.baseline_B
            if lc.only_correct:  # groups with no correct response keep their rewards
                any_correct = torch.zeros(int(batch.group_B.max()) + 1, dtype=torch.bool).index_put_(
                    (batch.group_B,), batch.reward_B > 0, accumulate=True)
                gate = gate & any_correct[batch.group_B]
            bonus = torch.where(gate, shaped - reward, torch.zeros_like(reward))
            reward = reward + bonus
            stats |= {"reward/length_bonus_abs_mean": float(bonus.abs().mean())}
        return reward, stats

    # -- advantages ------------------------------------------------------------------------------
    def outcome_advantage(self, rewards_B: torch.Tensor, group_B: torch.Tensor) -> torch.Tensor:
        raise TypeError(f"algorithm {self.name!r} defines neither outcome_advantage nor advantages")

    def advantages(self, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor]
                   ) -> tuple[torch.Tensor, dict[str, float]]:
        """Token-level advantages `adv_BT` (0 off the mask): the outcome advantage of each trajectory,
        computed over the members of its group's baseline only, broadcast to its action tokens."""
        keep = batch.baseline_B
        adv_B = torch.zeros_like(rewards_B)
        stats = {}
        if keep.any():
            adv_B[keep] = self.outcome_advantage(rewards_B[keep], batch.group_B[keep]).to(adv_B.dtype)
            stats = {"adv/mean": float(adv_B[keep].mean()), "adv/std": float(adv_B[keep].std(unbiased=False)),
                     "adv/abs_mean": float(adv_B[keep].abs().mean())}
        return adv_B[:, None] * batch.mask_BT, stats

    # -- loss ------------------------------------------------------------------------------------
    def surrogate(self, logprobs_BT: torch.Tensor, old_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor,
                  *, weights_BT: torch.Tensor | None, **kw) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The surrogate when no Clip-Cov / KL-Cov / decoupled variant is set: PPO's token-level clip
        (`policy_loss`); GSPO replaces it with its sequence-level one."""
        return policy_loss(logprobs_BT, old_BT, adv_BT, mask_BT, **kw, dual_clip=self.dual_clip, weights_BT=weights_BT)

    def row_separable(self) -> bool:
        """True when a minibatch's policy loss, rescaled by `minibatch_scale`, is the sum of its rows' shares, so
        micro-batches can accumulate and the ranks of a sharded learner can each take some of the rows.

        Every term of `loss` is aggregated over the minibatch's own `mask_BT`, whose per-row counts
        `minibatch_scale` restores — except MIS (its mask is narrowed by the importance band), the NLL term (a
        token mean over the successful rows only), Clip-Cov / KL-Cov (tokens chosen by covariance over the whole
        minibatch) and any algorithm with its own `loss` (MOPD: a mean over the tokens its ratio band keeps).
        Those normalisers are minibatch-wide, so the rows cannot be split; the learner runs them whole on every
        rank instead (train/minibatch.py's `policy_steps`)."""
        return (type(self).loss is Algorithm.loss and not isinstance(self.correction, MIS) and self.nll is None
                and self.clip_cov is None and self.kl_cov is None)

    def loss(self, mb: Batch, out: PolicyOutput, scores: dict[str, torch.Tensor], adv_BT: torch.Tensor,
             rewards_B: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The minibatch loss to minimise: surrogate + KL + entropy + NLL terms, and their detached stats."""
        mask, agg = mb.mask_BT, dict(aggregation=self.aggregation, max_len=ctx.max_tokens)
        old, weights, stats = mb.behavior_BT, None, {}
        if self.correction is not None:
            old = scores["proximal"]  # the trust region is centred on the learner's own log-probs
            if isinstance(self.correction, TIS):
                weights, s = tis(old, mb.behavior_BT, mask, cap=self.correction.cap)
            else:
                weights, kept, s = mis(old, mb.behavior_BT, mask, low=self.correction.low, high=self.correction.high)
                mask = mask * kept
            stats = {f"correction_{k}": v for k, v in s.items()}
        clip = dict(clip_low=self.clip_low, clip_high=self.clip_high)
        if self.decoupled is not None and (self.clip_cov is not None or self.kl_cov is not None):
            # decoupled (async) Clip-Cov / KL-Cov: the ratio centred on π_prox, each token weighted by π_prox/π_beh
            old = scores["proximal"]
            c = behavior_correction(old, mb.behavior_BT, mask, cap=self.decoupled.behavior_cap)
            weights = c if weights is None else weights * c
        if self.decoupled is not None and self.clip_cov is None and self.kl_cov is None:
            loss, s = decoupled_ppo(out.logprobs_BT, scores["proximal"], mb.behavior_BT, adv_BT, mask, **clip, **agg,
                                    behavior_cap=self.decoupled.behavior_cap, dual_clip=self.dual_clip, weights_BT=weights)
        elif self.clip_cov is not None:
            c = self.clip_cov
            loss, s = clip_cov(out.logprobs_BT, old, adv_BT, mask, clip_ratio=c.ratio, cov_low=c.cov_low,
                               cov_high=c.cov_high, generator=ctx.generator, weights_BT=weights, **clip, **agg)
        elif self.kl_cov is not None:
            loss, s = kl_cov(out.logprobs_BT, old, adv_BT, mask, k=self.kl_cov.k, coef=self.kl_cov.coef, weights_BT=weights,
                             **clip, **agg)
        else:
            loss, s = self.surrogate(out.logprobs_BT, old, adv_BT, mask, **clip, **agg, weights_BT=weights)
        stats = {**stats, **s, "pg_loss": loss.detach()}
        if self.kl.coef > 0:
            kl, s = kl_loss(out.full_logprobs_BT, scores["reference"], mask, estimator=self.kl.estimator,
                            coef=self.kl.coef, **agg)
            loss, stats = loss + kl, {**stats, **s}
        if self.entropy.active:
            ent, s = entropy_bonus(out.entropy_BT, mask, coef=ctx.entropy_coef, **agg)
            loss, stats = loss + ent, {**stats, "entropy_coef": s["entropy_coef"], "entropy_loss": s["entropy_loss"]}
        if self.nll is not None:
            nll, s = positive_nll(out.logprobs_BT, mask, rewards_B, threshold=self.nll.threshold)
            loss, stats = loss + self.nll.coef * nll, {**stats, **s}
        if out.entropy_BT is not None:
            stats["entropy_trained"] = masked_mean(out.entropy_BT.detach(), mask)
        return loss, stats
