import itertools

import numpy as np

from tracerl.tasks import DifficultyProfile, FilterConfig, Ledger, apply_filters
from tracerl.tasks.filters import filter_contaminated, filter_near_duplicates
from tracerl.tasks.text import MinHasher, jaccard, near_duplicate_pairs, ngrams, words

CLEAN = [
    "A farmer has 17 sheep and buys 5 more at the market; how many sheep does he have now?",
    "Compute the remainder when 2 to the power 10 is divided by 7, showing each step.",
    "A rectangle has a perimeter of 30 and one side of length 6; find its area.",
    "How many positive divisors does the number 360 have in total?",
    "Write a function that returns the n-th Fibonacci number using iteration only.",
    "If a car travels 150 kilometres in 2.5 hours, what is its average speed?",
    "Find the smallest prime number greater than 100 and explain why it is prime.",
    "Solve for x in the equation 3x minus 7 equals 20 and check your answer.",
]
EVAL_ITEM = ("aime-3", "A train leaves the station at 3 pm traveling at 60 miles per hour toward a city "
                       "180 miles away. At what time does it arrive?")


def planted_pool(make_task):
    clean = [make_task(f"c{i}", p) for i, p in enumerate(CLEAN)]
    bad = {
        "m1": ("malformed", make_task("m1", "What is the product of 12 and 12, written in digits?", answer="")),
        "m2": ("malformed", make_task("m2", "Compute 7 times 8 \ufffd and give the result as digits.", answer="56")),
        "m3": ("malformed", make_task("m3", "What is 81 divided by 9, written as a whole number?", answer="nine")),
        "s1": ("too_short", make_task("s1", "Add 2 3.")),
        "d1": ("exact_duplicate", make_task("d1", CLEAN[3].upper().replace(" ", "  "))),
        "n1": ("near_duplicate", make_task("n1", CLEAN[0].replace("17 sheep", "19 sheep"))),
        "x1": ("contaminated", make_task("x1", "Suppose a train leaves the station at 3 pm traveling at 60 miles "
                                               "per hour; how far has it gone by 5 pm?")),
        "p1": ("all_pass", make_task("p1", "What is the sum of the first ten positive integers, 1 through 10?")),
        "f1": ("all_fail", make_task("f1", "Prove that there are infinitely many primes of the form 4k plus 3.")),
    }
    prof = DifficultyProfile()
    prof.record("p1", 8, 8)
    prof.record("f1", 0, 8)
    for i in range(len(CLEAN)):
        prof.record(f"c{i}", 1 + i % 6, 8)  # strictly between 0 and 8 successes
    # interleave planted tasks after the clean task they copy so "first occurrence" is the clean one
    tasks = clean[:4] + [t for _, t in bad.values()] + clean[4:]
    return tasks, clean, bad, prof


ALL = FilterConfig(malformed=True, answer_pattern=r"-?\d+", min_prompt_words=4, exact_duplicates=True,
                   near_duplicates=True, near_duplicate_threshold=0.65, near_duplicate_ngram=3,
                   all_pass=True, all_fail=True)


def test_all_filters_remove_exactly_the_planted_tasks_with_reasons(make_task):
    tasks, clean, bad, prof = planted_pool(make_task)
    result = apply_filters(tasks, ALL, profile=prof, eval_sets={"aime": [EVAL_ITEM]})
    assert {t.id for t in result.kept} == {t.id for t in clean}
    assert {r.task_id: r.filter for r in result.ledger.records} == {k: v[0] for k, v in bad.items()}
    by_id = {r.task_id: r for r in result.ledger.records}
    assert by_id["m1"].reason == "answer and tests are both empty: nothing can grade it"
    assert "U+FFFD" in by_id["m2"].reason
    assert "does not match the pattern" in by_id["m3"].reason
    assert by_id["s1"].reason == "prompt has 3 words, fewer than 4"
    assert by_id["d1"].detail == {"duplicate_of": "c3"}
    assert by_id["n1"].detail["duplicate_of"] == "c0"
    # 19 words give 17 word 3-grams; "17" -> "19" (word 4) changes the 3 that contain it, on each side:
    # shared 14, union 14 + 3 + 3 = 20, J = 0.7
    assert by_id["n1"].detail["jaccard"] == 0.7
    assert by_id["x1"].detail["eval_id"] == "aime-3"
    assert by_id["p1"].reason.startswith("solved 8 of 8") and by_id["f1"].reason == "solved 0 of 8 attempts"
    assert result.ledger.counts() == {"malformed": 3, "too_short": 1, "exact_duplicate": 1, "near_duplicate": 1,
                                      "contaminated": 1, "all_pass": 1, "all_fail": 1}


def test_each_filter_alone_removes_only_its_planted_tasks(make_task):
    tasks, _, bad, prof = planted_pool(make_task)
    single = {
        "malformed": FilterConfig(malformed=True, answer_pattern=r"-?\d+"),
        "too_short": FilterConfig(min_prompt_words=4),
        "exact_duplicate": FilterConfig(exact_duplicates=True),
        "near_duplicate": FilterConfig(near_duplicates=True, near_duplicate_threshold=0.65, near_duplicate_ngram=3),
        "contaminated": FilterConfig(),
        "all_pass": FilterConfig(all_pass=True),
        "all_fail": FilterConfig(all_fail=True),
    }
    for name, cfg in single.items():
        # with no filter on, only `contaminated` runs (it runs whenever evaluation sets are declared)
        evals = {"aime": [EVAL_ITEM]} if name == "contaminated" else None
        result = apply_filters(tasks, cfg, profile=prof, eval_sets=evals)
        expected = {k for k, (f, _) in bad.items() if f == name}
        if name == "near_duplicate":
            expected.add("d1")  # an exact duplicate is also a near duplicate (J = 1) when exact dedup is off
        assert {r.task_id for r in result.ledger.records} == expected, name
        assert all(r.filter == name for r in result.ledger.records)


def test_decontamination_catches_shared_9gram_and_keeps_8gram_overlap(make_task):
    # Shares "a train leaves the station at 3 pm traveling at" (9 words) with the eval item.
    paraphrase = make_task("para", "Suppose a train leaves the station at 3 pm traveling at 60 mph; how far by 5 pm?")
    # Shares only "a train leaves the station at 3 pm" (8 words), then diverges.
    clean = make_task("clean", "Imagine a train leaves the station at 3 pm but moves at 45 miles an hour instead.")
    kept, out = filter_contaminated([paraphrase, clean], {"aime": [EVAL_ITEM]}, n=9)
    assert [t.id for t in kept] == ["clean"]
    (d,) = out
    assert d.task_id == "para" and d.filter == "contaminated"
    assert d.detail["ngram"].split()[:3] in (["a", "train", "leaves"], ["train", "leaves", "the"])
    assert len(d.detail["ngram"].split()) == 9 and d.detail["ngram"] in " ".join(words(EVAL_ITEM[1]))
    # With 8-grams the second task is caught too.
    kept8, _ = filter_contaminated([paraphrase, clean], {"aime": [EVAL_ITEM]}, n=8)
    assert kept8 == []


def test_heldout_tasks_are_never_filtered_and_can_serve_as_eval_set(make_task):
    held = make_task("h1", EVAL_ITEM[1], split="heldout")
    dup_of_held = make_task("t1", EVAL_ITEM[1])
    short_held = make_task("h2", "Add.", split="heldout")
    cfg = FilterConfig(min_prompt_words=4, decontaminate_against_heldout=True)
    result = apply_filters([held, dup_of_held, short_held], cfg)
    assert [t.id for t in result.kept] == ["h1", "h2"]
    assert [(r.task_id, r.filter, r.detail["eval_set"]) for r in result.ledger.records] == [("t1", "contaminated", "heldout")]


def test_minhash_lsh_finds_the_same_pairs_as_brute_force():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(300)]
    base = [list(rng.choice(vocab, size=30)) for _ in range(25)]
    texts = [b[:] for b in base]
    for k, b in enumerate(base[:15]):  # 1..5 of 30 words replaced: 3-gram Jaccard from 25/31 down to ~0.3
        v = b[:]
        for pos in rng.choice(30, size=1 + k % 5, replace=False):
            v[pos] = f"new{k}_{pos}"
        texts.append(v)
    sets = [ngrams(t, 3) for t in texts]
    brute = [(i, j) for i, j in itertools.combinations(range(len(sets)), 2) if jaccard(sets[i], sets[j]) >= 0.5]
    # 64 bands of 2 rows: a pair at J = 0.5 becomes a candidate with probability 1 − (1 − 0.25)^64 > 0.9999
    lsh = [(i, j) for i, j, _ in near_duplicate_pairs(sets, 0.5, num_perm=128, bands=64)]
    assert lsh == brute and len(brute) >= 9


def test_minhash_signature_agreement_estimates_jaccard():
    a = {(f"s{i}",) for i in range(100)}
    b = {(f"s{i}",) for i in range(50, 150)}  # |a ∩ b| = 50, |a ∪ b| = 150: J = 1/3
    h = MinHasher(num_perm=512, seed=1)
    agree = float((h.signature(a) == h.signature(b)).mean())
    assert abs(agree - 1 / 3) < 0.07  # binomial std with 512 perms ≈ 0.021


def test_near_duplicate_keeps_first_and_chains_do_not_cascade(make_task):
    # t1 ~ t0 and t2 ~ t1 but t2 not ~ t0: t1 goes (dup of t0), t2 stays because its only match is gone.
    t0 = make_task("t0", "one two three four five six seven eight nine ten")
    t1 = make_task("t1", "one two three four five six seven eight nine eleven")
    t2 = make_task("t2", "zero two three four five six seven eight nine eleven")
    kept, out = filter_near_duplicates([t0, t1, t2], threshold=0.75, ngram=2)
    # t0/t1 share 8 of 10 bigrams: J = 8/10; t1/t2 share 8 of 10: 0.8; t0/t2 share 7 of 11: 0.636
    assert [t.id for t in kept] == ["t0", "t2"] and [d.task_id for d in out] == ["t1"]


def test_ledger_roundtrip(tmp_path, make_task):
    tasks, _, _, prof = planted_pool(make_task)
    result = apply_filters(tasks, ALL, profile=prof, eval_sets={"aime": [EVAL_ITEM]})
    result.ledger.write_jsonl(tmp_path / "ledger.jsonl")
    back = Ledger.read_jsonl(tmp_path / "ledger.jsonl")
    assert back.records == result.ledger.records
