"""What serving the methods to many people needs, apart from the methods themselves.

- `threads`: long-lived threads for model work (every model call, and PEARL's target lane, which
  the app lends to PEARL as its executor).
- `pools`: server-wide bounds on what visitors' state may hold (the online learners' adapted drafts).
- `limits`: what the app grants one visitor (`AppLimits`, the SPECVIZ_LIMIT_* variables).
- `visitors`: who a visitor is, as the network sees them (the address the line and the upload
  bounds count by, behind SPECVIZ_TRUSTED_PROXIES proxies).
- `uploads`: uploads bounded by number (per request, per address) and never empty.
- `sessions`: a visitor's state for the stateful methods, passed to each run as `session=`.
- `turns`: the models' line, one run at a time, fair between visitors.
- `stops`: one run control: a visitor's Stop, a closed page and a cancelled request, reaching a
  run here or in a ZeroGPU worker through its stop key.
- `race`: a race as plain data, immutable snapshots of each method's run (`Race`, `MethodRun`).
- `racing`: the Race's engine: the methods one after another, each in its turn on the models.
- `runs`: the models' side of a comparison (the Race's, a lab tab's): one method's run on the
  models' thread, as typed events.
- `compare`: the lab tabs' comparisons: rows timed one after another, the median of N runs each.
- `timing`: whether a run's timings can be the method's own (the flags of a disturbed run).
- `saved`: a race saved to a file and read back, every value checked (files come from strangers).
- `gpu`: where a model call runs (a ZeroGPU worker, or here) and the seconds it asks for.
- `janitor`: what gradio keeps for each visitor, kept bounded; glibc's heaps shared by threads.
- `stream`: the serving simulator, a stream of requests served by OSD (the Online-learning tab, the
  OSD experiment).

The library (`specviz.methods`, `specviz.runner`, ...) never imports this package: a method takes
what it is lent (an executor, a session) as arguments of `specviz.run`, and without them makes its
own for the run. Nothing here imports torch at import.
"""
