"""The formats every layer shares, at the bottom of the layering (imports nothing else of polyplan):

- the files the stages exchange, each with its types and one codec: `candidates` (models.yaml),
  `profile` (types) + `profile_codec`, `plan` (types and reader; `planner.plan_file` builds one),
  `report` (report.json, the validation report: types and codec; `validation.report` builds one);
- what they record: `sampling` (the sampling mode, parsed once), `overhead` (the loop's costs);
- `kinds` (what a JSON file is, for one clear error when a file of another kind is given);
- the edge they are read and written through: `errors`, `inputs`, `atomic`, `outputs`,
  `options` (range checks of command-line numbers), `cache` (the cache folder);
- `processor` (the processor a profile was timed on, and the line when a plan is used elsewhere);
- `verbosity` (whether other libraries may print on stderr: `polyplan --verbose`).
"""
