"""polyplan.pipeline: profile -> plan -> validate -> demo, and the benchmarks of the whole loop.

`stages` runs the pipeline (`profile_candidates` is the one profiling entry point); `loop_costs`
measures what the exact model reads besides T_i(k) and α; `demo` holds the demo's settings;
`load` is the load generator and `under_load` the loop benchmark under it.
"""
