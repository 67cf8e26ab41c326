"""The daemon: the process around the scheduling core (kube-scheduler's `cmd/kube-scheduler/app`).

`app.py` wires it: informers and watches keep the core's cache current (`informer.py`,
`watches.py`), the outbox's intents become API calls (`binder.py`, with the PreBind steps of
`volume_prebind.py` and `dra_prebind.py`; `reports.py` for the pods' conditions and events;
`evictions.py`; `gang_status.py` for PodGroups), `history.py` logs what a replay needs, `leader.py`
elects one active replica, `config_reload.py` applies a changed config file, and `health.py` serves
/healthz, /readyz and /metrics. The core (`ai_scheduler.scheduler`) imports nothing of this package.
"""
