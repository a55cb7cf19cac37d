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
- `runs`: the models' side of a race: one method's run on the models' thread, as typed events.
- `janitor`: what gradio keeps for each visitor, kept bounded; glibc's heaps shared by threads.
- `stream`: the serving simulator, a stream of requests served by OSD (the Online-learning tab, the
  OSD experiment).

The library (`specviz.methods`, `specviz.runner`, ...) never imports this package: a method takes
what it is lent (an executor, a session) as arguments of `specviz.run`, and without them makes its
own for the run. Nothing here imports torch at import.
"""
