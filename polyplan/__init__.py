"""polyplan: plan, run and validate polybasic speculative decoding chains.

The sub-packages `polyplan.planner` (pure math), `polyplan.profiler` and `polyplan.decoder`
(torch) live in the repository's top-level folders; this package holds the CLI and the
types shared between them.
"""

__version__ = "0.1.0"
