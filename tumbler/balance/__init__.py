"""Balancing a running program: the loop between the platform and the engine.

Owns everything a balancing run does over time: the controller and the
components it builds, each owning its state (``controller.py``; threads.py
tracks the threads, loads.py their loads, quiet.py the quiet rounds,
speedstep.py speed balancing's steps, placer.py the binding, handback.py
putting threads back, merged.py merging domains and splitting them
again, otherwork.py other work on the domains' CPUs; timings.py the
loop's timings), the domains
(domains.py, from the targets' CPUs: targets.py), following the machine
(machine.py, capacity.py), space sharing between programs (sharing.py,
llc.py), the spread the summary reports (spreads.py), and the static
placements ``compare`` measures against (static.py).

Imports go down only: to the engine (the decisions, pure), the platform
(samples and binders) and the leaves; never to state/, observers/ or
anything above (a run hands the controller its journal and observers).
"""
