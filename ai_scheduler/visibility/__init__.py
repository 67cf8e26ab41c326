"""What users talk to: the visibility API and its web page, read-only views of the scheduler's state.

`resources.py` builds the resources (pending pods in queue order with their reasons, quotas, GPUs and
their holders, recent decisions) from the core's state; `server.py` serves them through the
Kubernetes aggregation layer, so that RBAC decides who sees what; `webui.py` is the page. The core
(`ai_scheduler.scheduler`) imports nothing of this package; the daemon (`ai_scheduler.daemon`) starts it.
"""
