"""The runner: pre-registered A/B windows on LLM inference servers, recorded in the ledger.

Packages, in layer order (a module imports only what is below it; ``docs/architecture.md``)::

    foundation  vocabulary   the closed vocabularies (roles, gates, verdicts, statuses, phases)
                fields       the one field reader (every refusal a FieldError naming the field)
    leaves      sim          the simulated vLLM host
                measure      the measurement client (one wave of streaming requests + counters)
                drivers      host drivers (command templates, the simulator) and site files
    stack       events       the event catalogue: typed payloads, validators, WindowLog
                plan         plans: model, parse, register
                state        state by replay (the pure fold)
                decide       the decision rules win2-v1 and pp3-v1, their inputs, verdict replay, power figures
                gates        the gates checked before any host contact, and admission
                report       window and verdict reports
                audit        protocol invariants and the full audit
                execution    the step machine and the runner
                demo         ``tally demo``

The runner keeps no state of its own: everything it acts on is folded from the ledger's
events (``runner.state``), and everything it does is appended as an event.
"""

__all__: list[str] = []  # the runner speaks through its packages' faces
