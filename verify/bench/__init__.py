"""``attn-theory bench``: the Taylor-2 attention forms timed side by side.

Writes ``benchmarks.md`` and ``benchmarks.json`` into the report directory (and nothing else:
``verify.render.staging.staged_write`` keeps every other report file). These two files carry
timings, so unlike the rest of ``reports/`` they are not byte-identical on rerun.

Method (one process, fp32, B = 1, H = 4, d = d_v = 16, causal):
- a correctness gate first: the chunked, parallel and recurrent forms and flash-linear-attention's
  ``naive_chunk_based`` against a float64 reference, within the derived D10 bound
  (``verify.exact.errors.attention_error_bound``); a failure stops the run before anything is
  timed;
- every cell (a method at a length) is warmed up, then timed in interleaved repeats: each repeat
  visits every cell once, the starting cell rotated, so machine noise hits all methods alike;
- medians and interquartile ranges; ratios are paired per repeat (other / chunked in the same
  repeat) before the median is taken, so they are what the report leads with;
- ``torch.set_num_threads`` fixed (default 1), ``torch.inference_mode``, garbage collection off
  inside a timed call.

FLOPs of the chunked form are counted analytically (``chunked_flops``); its matmul part is
checked against ``torch.utils.flop_counter.FlopCounterMode`` on the same call.

Layout (imports point down; this package measures and never writes a file):

- ``config``: ``Config`` (``FULL``, ``QUICK``), the methods, the goals' thresholds;
- ``measure``: FLOP counts, interleaved timing (``measure``), peak RSS, profiles;
- ``analyse``: quartiles, paired ratios, growth fits, crossover, goals and limits (``analyse``);
- ``collect``: the gate, the cells, the run; ``collect(cfg)`` returns the JSON document;
- the command (``verify.cli.bench``) measures, then writes with ``verify.render.benchmarks``.

The Markdown and the file writing are in ``verify.render.benchmarks``.

Importing this package is cheap: torch loads when a command runs.
"""

from __future__ import annotations
