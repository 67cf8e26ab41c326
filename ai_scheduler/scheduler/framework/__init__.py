"""The scheduling framework, under kube-scheduler's names (`pkg/scheduler/framework`).

`interface.py` declares the extension points a plugin implements (PreFilter, Filter, Score, the
device Reserve step) and the static results kept per pod signature; `runtime.py` holds `Framework`,
one profile's plugins bound to the cache, which runs a cycle over the node table (filter, score,
select) and says why nodes failed; `plugins/` holds one module per plugin.
"""
