"""``odradek verify``: a built-in durability checker in the manner of Jepsen's queue tests.

Modules: ``netns`` (test hosts as network namespaces), ``cluster`` (the run's cluster, loop disk, clock files),
``clockshift`` (wall-clock steps: builds and drives the ``clockshift.c`` LD_PRELOAD shim), ``workload``
(producers and a consumer group, recorded), ``nemesis`` (faults), ``checker`` (the checks), ``report`` (summary,
JSON, timeline PNG), ``cli`` (the command).
"""
