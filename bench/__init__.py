"""JobDeck benchmarks: figures printed for people to read, not timed tests.

Every benchmark starts its own real `jobdeck up` server (or `jobdeck server` and a remote
`jobdeck agent`) as subprocesses on a fresh data directory and talks to it over HTTP from this
process, so the client and the server run on separate cores. Run `python -m bench --help` for the flags; `python -m bench` runs them all.

Modules:
  cli        flags, the run, the final table
  context    the scale of a run and the shared run state (processes started, their reports)
  server     start / wait for / stop one server or agent subprocess; CPU and memory accounting; log scan
  profile    optional py-spy recording of a server, summarised as hot spots
  workload   job specs and the client-side helpers every benchmark shares
  rawhttp    a minimal keep-alive HTTP/1.1 client for the request-rate loops (httpx is too slow there)
  baseline   SQLite alone: executemany of the same rows, the ceiling for batch submit
  report     figures, floors, percentiles, machine facts and the table
  submit     1 + 2: batch and single submit rates, with their same-run baselines
  throughput 3: end-to-end no-op throughput (streamed, and pre-submitted then resumed)
  latency    4: pick-up latency at a steady submit rate
  remote     5 + 6: one remote agent process: no-op throughput beside the local agent, and
             10,000 sleeping jobs at once with the agent's RSS
"""
