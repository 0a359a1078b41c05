"""polyplan.validation: running planned chains side by side and judging their predictions
(docs/validation.md).

`chain_runs` decodes each chain next to target-only decoding, interleaved, on primed members
(`primed`), re-timing latency as it goes (`retime`); `paired` holds the paired-ratio statistics;
`results` judges each prediction; `reporting` writes report.md, report.json (typed in
`formats.validation_report`) and the plots (`plots`); `self_check` is recommend's short run;
`measured_run` reads a measured run back and pairs its chains into insertions.
"""
