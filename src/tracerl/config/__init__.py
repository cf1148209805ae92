"""Typed recipe configuration: one section per file, every model a `Cfg` (docs/training.md).

`load_recipe` (config/loading.py) reads a recipe and its overrides into a `Recipe` (config/recipe.py);
what settings of different sections do not combine is refused in config/combinations.py.
"""

from tracerl.config.base import Cfg
from tracerl.config.envs import EnvConfig, EnvEntry, MixtureConfig
from tracerl.config.eval import EvalConfig
from tracerl.config.loading import load_recipe, recipe_names, safe_yaml
from tracerl.config.model import LoraSettings, ModelConfig, TinyModelConfig
from tracerl.config.recipe import Recipe
from tracerl.config.rl import RLConfig, RLStageConfig
from tracerl.config.run import RunConfig
from tracerl.config.sampling import SamplingConfig
from tracerl.config.sft import RejectionConfig, SFTConfig

__all__ = ["Cfg", "EnvConfig", "EnvEntry", "EvalConfig", "LoraSettings", "MixtureConfig", "ModelConfig",
           "RLConfig", "RLStageConfig", "Recipe", "RejectionConfig", "RunConfig", "SFTConfig", "SamplingConfig",
           "TinyModelConfig", "load_recipe", "recipe_names", "safe_yaml"]
