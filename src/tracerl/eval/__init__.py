"""Evaluation: held-out runs under frozen protocols, pass@k, reports."""
