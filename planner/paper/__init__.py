"""polyplan.planner.paper: the paper's theory, as printed, and fed from a profile.

- `capped_geometric`: tokens per verification, exact (sympy-derived) and as the paper prints it (eq. 3, 4, A.2).
- `lemma31`: Lemma 3.1's φ_i and ideal time T for n models.
- `insertion`: Theorem 3.2 (conditions, assumptions, exact 3-vs-2 difference, verdict).
- `paper_model`: Lemma 3.1 fed from a profile.
- `insertion_triples`: Theorem 3.2 on one insertion (upper, middle, lower) of a profile's chains.
- `at_load`: Lemma 3.1, Theorem 3.2 and the physical limit with B sequences in flight.
"""
