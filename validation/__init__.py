"""polyplan.validation: running planned chains side by side and judging their predictions
(docs/validation.md; its modules: docs/architecture.md). `chain_runs.validate_plan` runs them,
`results` judges, `reporting` writes the report; `self_check` is recommend's short run.
"""
