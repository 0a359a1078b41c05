"""polyplan.validation: running planned chains side by side and judging their predictions.

`chain_runs` decodes each chain next to target-only, prompt by prompt and interleaved, re-timing
the latency the prediction used (`retime`) on primed members (`primed`); `paired` holds the
paired-ratio statistics; `results` judges each prediction (inside its interval and within
10%); `report` builds report.json's record (typed, with its codec, in `formats.validation_report`) and
writes it, report.md and the terminal table, `plots` the PNGs, `report_folder` the folder they
go to, `categories` the per-category breakdown; `measured_run` reads a measured run back (a
profile, with its plan and report beside it) and pairs its validated chains into insertions.
"""
