"""Typed configuration of task operations: sources, filters, profiles and samplers.

These models are embedded in the recipe schema. Defaults are deliberately inert: a uniform sampler
and no filters, so that every filter a run applies is one the recipe names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg


class TaskSourceConfig(Cfg):
    """One place tasks come from: a local task file, a local Hugging Face dataset, or an env generator."""

    kind: Literal["jsonl", "parquet", "hf", "generator"] | None = Field(
        None, description="Source type; inferred from `path` (.jsonl, .parquet, a directory means hf) or `env` when unset.")
    name: str | None = Field(
        None, description="Source name written into every task's `source`; defaults to the file stem or the env name.")
    path: str | None = Field(None, description="Task file or saved dataset directory (not used by generator sources).")
    env: str | None = Field(None, description="Registered environment whose `generate` builds tasks (generator sources).")
    n: int = Field(1000, ge=1, description="Number of tasks a generator source builds.")
    seed: int = Field(0, description="Seed passed to the generator; the same seed gives the same tasks.")
    difficulty: float | tuple[float, float] | None = Field(
        None, description="Difficulty passed to the generator: one value or a (low, high) range in [0, 1]; None lets it choose.")
    split: Literal["train", "heldout"] = Field(
        "train", description="Split of rows that do not declare one, and the split a generator is asked for.")
    hf_split: str | None = Field(None, description="Which split of a saved DatasetDict to read (hf sources with several splits).")
    license: str | None = Field(None, description="License of rows that do not declare one; a row without either is bad.")
    revision: str | None = Field(
        None, description="Source revision of rows that do not declare one; defaults to the file's content hash.")
    field_map: dict[str, str] = Field(
        default_factory=dict, description="Renames columns to schema fields before validation, e.g. {question: prompt}.")
    extra_columns: Literal["error", "metadata"] = Field(
        "error", description="Columns that are not schema fields (after field_map): error makes the row bad; metadata "
                             "keeps them under the task's metadata. Unset in a reward: recipe, it is metadata there, so every column reaches "
                             "the reward functions.")

    @model_validator(mode="after")
    def _resolve_kind(self) -> "TaskSourceConfig":
        if self.kind is None:
            if self.env is not None:
                self.kind = "generator"
            elif self.path is not None:
                low = self.path.lower()
                self.kind = "jsonl" if low.endswith(".jsonl") else "parquet" if low.endswith(".parquet") else "hf"
            else:
                raise ValueError("a task source needs a `path` (task file or dataset directory) or an `env` (generator)")
        if self.kind == "generator" and not self.env:
            raise ValueError("a generator source needs `env`, the name of a registered environment")
        if self.kind != "generator" and not self.path:
            raise ValueError(f"a {self.kind} source needs `path`")
        return self


class FilterConfig(Cfg):
    """Which tasks to discard before sampling; every discard is written to the ledger with its reason."""

    malformed: bool = Field(
        False, description="Drop tasks whose prompt is empty, whose answer/tests are empty, or whose text holds encoding damage.")
    answer_pattern: str | None = Field(
        None, description="Regular expression every answer must fully match (checked by the malformed filter), e.g. '-?\\d+'.")
    min_prompt_words: int = Field(0, ge=0, description="Drop prompts with fewer words than this (0 turns the filter off).")
    exact_duplicates: bool = Field(False, description="Drop tasks whose normalized prompt equals an earlier task's.")
    near_duplicates: bool = Field(False, description="Drop tasks whose word n-gram Jaccard similarity to an earlier task reaches the threshold.")
    near_duplicate_threshold: float = Field(0.8, gt=0.0, le=1.0, description="Jaccard similarity at or above which two prompts are near-duplicates.")
    near_duplicate_ngram: int = Field(5, ge=1, description="Word n-gram length of the shingles compared for near-duplicates.")
    minhash_permutations: int = Field(64, ge=8, description="MinHash signature length used to find near-duplicate candidates.")
    minhash_bands: int = Field(16, ge=1, description="LSH bands the signature is split into; must divide minhash_permutations.")
    eval_sets: list[str] = Field(
        default_factory=list, description="Task files (JSONL/Parquet) whose prompts training tasks must not overlap.")
    decontaminate_against_heldout: bool = Field(
        False, description="Also treat the held-out tasks of the pool as an evaluation set for decontamination.")
    contamination_ngram: int = Field(9, ge=1, description="Word n-gram length whose overlap marks contamination (9 as in AceReason).")
    all_pass: bool = Field(False, description="Drop tasks the difficulty profile says are (nearly) always solved.")
    all_pass_threshold: float = Field(1.0, gt=0.0, le=1.0, description="Pass rate at or above which a task counts as all-pass.")
    all_fail: bool = Field(False, description="Drop tasks the difficulty profile says are never solved.")
    min_attempts: int = Field(1, ge=1, description="Profile attempts a task needs before the all-pass/all-fail filters judge it.")

    @model_validator(mode="after")
    def _bands_divide(self) -> "FilterConfig":
        if self.minhash_permutations % self.minhash_bands:
            raise ValueError(
                f"minhash_bands ({self.minhash_bands}) must divide minhash_permutations ({self.minhash_permutations})")
        return self


class CurriculumConfig(Cfg):
    """Gaussian target over pass rate whose mean moves linearly from easy to hard (Nemotron, AceReason)."""

    mean_start: float = Field(0.8, ge=0.0, le=1.0, description="Target pass rate at step 0 (high = easy tasks first).")
    mean_end: float = Field(0.2, ge=0.0, le=1.0, description="Target pass rate once `steps` steps have been drawn.")
    std: float = Field(0.15, gt=0.0, description="Standard deviation of the Gaussian over pass rate.")
    steps: int = Field(100, ge=1, description="Number of batches over which the mean moves from mean_start to mean_end.")
    unprofiled_pass_rate: float = Field(
        0.5, ge=0.0, le=1.0, description="Pass rate assumed for tasks the profile does not cover (counted in the report).")


class DynamicSamplingConfig(Cfg):
    """DAPO dynamic sampling: draw more prompts until the batch holds enough non-zero-variance groups."""

    base: Literal["uniform", "mixture", "curriculum"] = Field(
        "uniform", description="Sampler that proposes prompts; dynamic sampling only decides which groups to keep.")
    max_rounds: int = Field(4, ge=1, description="Most generation rounds per batch before giving up (the cap on extra cost).")
    pad_with_zero_variance: bool = Field(
        False, description="When the cap is hit, fill the batch with zero-variance groups instead of returning it short.")


class SamplerConfig(Cfg):
    """How the next batch of training tasks is drawn from the filtered pool."""

    kind: Literal["uniform", "mixture", "curriculum", "dynamic"] = Field(
        "uniform", description="uniform, per-source mixture, pass-rate curriculum, or dynamic (non-zero-variance) sampling.")
    seed: int = Field(0, description="Seed of the sampler's random stream; saved and restored with the checkpoint.")
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="Target share of each source (mixture and curriculum); empty means each source's share of the pool.")
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig, description="Curriculum settings (kind=curriculum).")
    dynamic: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig, description="Dynamic sampling settings (kind=dynamic).")

    @model_validator(mode="after")
    def _weights_positive(self) -> "SamplerConfig":
        bad = {k: v for k, v in self.weights.items() if not v >= 0}
        if bad or (self.weights and sum(self.weights.values()) <= 0):
            raise ValueError(f"sampler weights must be non-negative with a positive sum, got {self.weights}")
        return self


class ProfileConfig(Cfg):
    """Difficulty profiling: pass rates of each task under a policy."""

    path: str | None = Field(None, description="Difficulty profile JSON to load (written by `tracerl tasks profile`).")
    attempts: int = Field(8, ge=1, description="Attempts per task when profiling.")
    tasks: int = Field(
        0, ge=0, description="In training: when a stage needs a profile and `path` is unset, profile this many training "
        "tasks (a seeded draw) under the policy at the stage start; the stage then trains on those tasks.")
    reprofile_each_stage: bool = Field(
        False, description="Before each RL stage after the first, re-profile and drop tasks that became all-pass.")


class TasksConfig(Cfg):
    """Everything about the task pool of a run or stage."""

    sources: list[TaskSourceConfig] = Field(default_factory=list, description="Where tasks come from, in order.")
    filters: FilterConfig = Field(default_factory=FilterConfig, description="Filters applied to training tasks.")
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="How batches are drawn.")
    profile: ProfileConfig = Field(default_factory=ProfileConfig, description="Difficulty profile settings.")
