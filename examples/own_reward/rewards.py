def correct(completions, answer, **kwargs):
    """1.0 when the completion is exactly the answer, else 0.0 (TRL-style: one value per row)."""
    return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]
