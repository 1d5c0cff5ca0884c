"""Running checks: one plan, one isolated worker pool with one watchdog, one shrink policy.

- ``jobs``: what to run (a property in a dtype on a variant, or the black-box probe) and how a
  worker builds the variant (``BuiltinLoader``, ``SpecLoader``, ``ObjectLoader``).
- ``run``: one job in this process, never raising for a misbehaving variant.
- ``pool``: jobs in worker processes, dispatched one at a time, each under the watchdog.
- ``check``: ``check(target, **claims)`` -- the probes, then the battery (``verify.check``).
- ``catalogue``: the battery on the built-in implementations (``attn-theory verify``, the
  verification report).

Importing it is cheap: torch, hypothesis and the catalogue load when a job runs.
"""
