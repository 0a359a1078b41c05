"""The formats every layer shares, at the bottom of the layering (imports nothing else of polyplan):

- the files the stages exchange, each with its types and its entry points (`read_X`, `write_X`,
  `decode_X`, `encode_X`): `candidates` (models.yaml), `profile`, `plan` (`planner.plan_builder`
  builds one), `validation_report` (report.json; `validation.reporting` builds one);
- `codec`: the one field-driven encoder/decoder of profile, plan and report (frozen records,
  their field types the schema, unknown keys refused), and `checks`, the field checks their
  records name in their metadata;
- what they record: `sampling` (the sampling mode, parsed once), `overhead` (the loop's costs);
- `kinds` (what a JSON file is, for one clear error when a file of another kind is given);
- the edge they are read and written through: `errors`, `inputs`, `atomic`, `outputs`,
  `options` (range checks of command-line numbers), `cache` (the cache folder);
- `processor` (the processor a profile was timed on, and the line when a plan is used elsewhere);
- `verbosity` (whether other libraries may print on stderr: `polyplan --verbose`).
"""
