"""polyplan.pipeline: profile -> plan -> validate -> demo, and the benchmarks of the whole loop.

`pipeline` is the loop in one module (`profile_candidates` is the one profiling entry point);
`loop_costs` measures what the exact model reads besides T_i(k) and alpha (agreement runs,
the decoder's loop overhead, HF's overhead, switch costs); `demo` prepares the embedded family;
`load` is the load generator and `under_load` the loop benchmark under it.
"""
