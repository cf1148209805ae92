import inspect

import pydantic
import pytest

import tracerl.config.tasks as config_module
from tracerl.errors import UserError
from tracerl.tasks import (DifficultyProfile, FilterConfig, MixtureSampler, SamplerConfig, TasksConfig,
                           TaskSourceConfig, UniformSampler, build_pool, make_sampler)

MODELS = [m for _, m in inspect.getmembers(config_module, inspect.isclass)
          if issubclass(m, pydantic.BaseModel) and m.__module__ == config_module.__name__ and not m.__name__.startswith("_")]


def test_every_config_field_is_described_and_unknown_keys_fail():
    assert len(MODELS) == 7
    for model in MODELS:
        assert model.__doc__, model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
        with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
            model.model_validate({"surely_not_a_field": 1, **({"path": "x.jsonl"} if model is TaskSourceConfig else {})})


def test_defaults_are_inert_uniform_and_no_filters():
    assert SamplerConfig().kind == "uniform"
    f = FilterConfig()
    assert not (f.malformed or f.exact_duplicates or f.near_duplicates or f.all_pass or f.all_fail or f.eval_sets)
    assert f.min_prompt_words == 0 and f.contamination_ngram == 9
    with pytest.raises(pydantic.ValidationError, match="must divide"):
        FilterConfig(minhash_permutations=64, minhash_bands=10)
    with pytest.raises(pydantic.ValidationError, match="non-negative"):
        SamplerConfig(weights={"a": -1.0})


def test_build_pool_from_config_with_manifest_and_sampler(write_jsonl):
    rows = [{"id": f"q{i}", "prompt": f"Question number {i} asks for {i} squared.", "answer": str(i * i)}
            for i in range(6)]
    rows += [{"id": "dup", "prompt": "question number 0 asks for 0 squared", "answer": "0"}, "{broken"]
    path = write_jsonl(rows)
    evals = write_jsonl([{"id": "e", "prompt": "Question number 5 asks for 5 squared.", "answer": "25"}], "eval.jsonl")
    cfg = TasksConfig(sources=[TaskSourceConfig(path=str(path), license="MIT", name="sq")],
                      filters=FilterConfig(exact_duplicates=True, eval_sets=[str(evals)]),
                      sampler=SamplerConfig(kind="mixture"))
    pool = build_pool(cfg)
    assert [t.id for t in pool.train] == ["q0", "q1", "q2", "q3", "q4"]
    assert pool.ledger.counts() == {"exact_duplicate": 1, "contaminated": 1}
    m = pool.manifest()
    assert (m["num_loaded"], m["num_kept"], m["num_bad_rows"]) == (7, 5, 1)
    assert m["sources"][0]["name"] == "sq" and len(m["pool_sha256"]) == 64
    assert isinstance(make_sampler(cfg.sampler, pool.train), MixtureSampler)
    dyn = SamplerConfig(kind="dynamic")
    assert isinstance(make_sampler(dyn, pool.train), UniformSampler)  # dynamic draws from its base sampler
    with pytest.raises(UserError, match="needs a difficulty profile"):
        make_sampler(SamplerConfig(kind="curriculum"), pool.train)
    with pytest.raises(UserError, match="need a difficulty profile"):
        build_pool(TasksConfig(sources=cfg.sources, filters=FilterConfig(all_pass=True)))
    prof = DifficultyProfile()
    prof.record("q1", 4, 4)
    kept = build_pool(TasksConfig(sources=cfg.sources, filters=FilterConfig(all_pass=True)), profile=prof)
    assert "q1" not in {t.id for t in kept.train} and kept.ledger.counts() == {"all_pass": 1}


def test_ids_colliding_across_sources_are_a_user_error(write_jsonl):
    a = write_jsonl([{"id": "x", "prompt": "p", "answer": "1"}], "a.jsonl")
    b = write_jsonl([{"id": "x", "prompt": "q", "answer": "2"}], "b.jsonl")
    with pytest.raises(UserError, match=r"appears in sources 'a' \(train\) and 'b' \(train\)"):
        build_pool(TasksConfig(sources=[TaskSourceConfig(path=str(a), license="MIT"),
                                        TaskSourceConfig(path=str(b), license="MIT")]))
