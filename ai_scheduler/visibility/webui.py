"""The web page of the visibility API: the queue, quotas, a GPU map and recent decisions, in a browser.

One self-contained HTML page (no external scripts, styles or fonts: clusters are often offline), served
by the daemon as the `ui` resource of the visibility API (`visibility.ai-scheduler.io/v1alpha1`), so
that it is reached exactly as the API is, through the Kubernetes API server with the user's own
credentials, e.g. `kubectl proxy` then
http://127.0.0.1:8001/apis/visibility.ai-scheduler.io/v1alpha1/ui/, and shows what RBAC lets that user
see. The page is read-only: its script fetches the API's JSON resources next to it (`pendingpods`,
`quotas`, `gpus`, `decisions`) every two seconds and redraws:

- Queue: the pending pods in the scheduler's order: position overall and in its queue, queue and level,
  priority, why it waits (the Unschedulable reason), expected start; pods the user may not see are
  shown by position only.
- Quotas: per group, user and queue, use against max (and the guaranteed min of groups).
- GPUs: every node's managed devices (index, model, free of total memory, NVLink island) with the pods
  that hold each and how much, and the logical domains (Domain objects) the node belongs to.
- Recent decisions: the last scheduling decisions, newest first.
- Use over time (where the daemon keeps accounting, and RBAC lets the user `list usage`): GPU-hours by
  user per hour over the last day, one line each in an inline SVG chart, with the totals beside it.

Element ids and data attributes (`#pending tr[data-pod]`, `.gpu[data-gpu="node/index"]`, `.holder`)
are stable, for tests and scripts.
"""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ai-scheduler</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: left; }
th { background: #f3f3f3; } td.num { text-align: right; } .muted { color: #888; }
#error { color: #b00; white-space: pre-wrap; }
.nodes { display: flex; flex-wrap: wrap; gap: 10px; }
.node { border: 1px solid #bbb; border-radius: 6px; padding: 6px; min-width: 180px; }
.node h3 { font-size: 1em; margin: 0 0 4px 0; }
.gpu { border: 1px solid #ccc; border-radius: 4px; margin: 3px 0; padding: 3px 5px; }
.gpu.busy { background: #fde9d9; } .gpu.part { background: #fff6d5; } .gpu.free { background: #e8f6e8; }
.holder { display: block; font-size: 12px; }
.bar { background: #eee; width: 120px; height: 10px; display: inline-block; vertical-align: middle; }
.bar span { background: #4a7; height: 10px; display: block; }
#chart { border: 1px solid #ccc; background: #fcfcfc; }
#chart polyline { fill: none; stroke-width: 2; }
</style>
</head>
<body>
<h1>ai-scheduler</h1>
<div class="muted">updated <span id="updated">never</span></div>
<div id="error"></div>
<h2>Queue</h2>
<table id="pending"><thead><tr><th>#</th><th>pod</th><th>queue (level, position)</th><th>priority</th>
<th>why it waits</th><th>expected start</th></tr></thead><tbody></tbody></table>
<h2>Quotas</h2>
<table id="quotas"><thead><tr><th>kind</th><th>name</th><th>resource</th><th>used</th><th>max</th>
<th>min</th><th></th></tr></thead><tbody></tbody></table>
<h2>GPUs</h2>
<div id="gpus" class="nodes"></div>
<h2>Recent decisions</h2>
<table id="decisions"><thead><tr><th>time</th><th>pod</th><th>result</th><th>node</th><th>message</th></tr>
</thead><tbody></tbody></table>
<h2>Use over time</h2>
<div id="usage"><div class="muted" id="usage-range"></div>
<svg id="chart" width="640" height="200" viewBox="0 0 640 200" role="img"
 aria-label="GPU-hours per hour"></svg>
<table id="usage-totals"><thead><tr><th></th><th>user</th><th>GPU-hours</th><th>cpu-hours</th>
<th>pods</th></tr></thead><tbody></tbody></table></div>
<script>
"use strict";
const base = location.pathname.replace(/\\/ui\\/?$/, "");
const errors = [];
function text(value) { return value === null || value === undefined ? "" : String(value); }
function cell(row, value, cls) {
  const td = document.createElement("td"); td.textContent = text(value); if (cls) td.className = cls;
  row.appendChild(td); return td;
}
async function get(resource) {
  const reply = await fetch(base + "/" + resource, {headers: {"Accept": "application/json"}});
  if (!reply.ok) {
    let message = reply.status + " " + reply.statusText;
    try { const body = await reply.json(); if (body.message) message = body.message; } catch (e) {}
    errors.push(resource + ": " + message); return null;
  }
  return reply.json();
}
function body(id) {
  const tbody = document.querySelector("#" + id + " tbody"); tbody.replaceChildren(); return tbody;
}
function pending(list) {
  const tbody = body("pending");
  for (const item of list.items) {
    const meta = item.metadata || {};
    const row = document.createElement("tr");
    const who = meta.name ? meta.namespace + "/" + meta.name : null;
    if (who) row.dataset.pod = who;
    cell(row, item.position, "num");
    cell(row, who || "(not yours)", who ? "" : "muted");
    cell(row, text(item.queue) + " (level " + text(item.level) + ", #" + text(item.positionInQueue) + ")");
    cell(row, item.priority, "num");
    cell(row, item.reason).className = "reason";
    cell(row, item.expectedStart || "-").className = "start";
    tbody.appendChild(row);
  }
}
function quotas(list) {
  const tbody = body("quotas");
  for (const item of list.items) {
    const resources = new Set([...Object.keys(item.used || {}), ...Object.keys(item.max || {}),
                                ...Object.keys(item.min || {})]);
    for (const resource of resources) {
      const row = document.createElement("tr");
      row.dataset.quota = item.kind + "/" + item.name + "/" + resource;
      cell(row, item.kind); cell(row, item.name); cell(row, resource);
      const used = (item.used || {})[resource], max = (item.max || {})[resource];
      cell(row, used, "num"); cell(row, max, "num"); cell(row, (item.min || {})[resource], "num");
      const td = cell(row, "");
      const share = parseFloat(used) / parseFloat(max);
      if (isFinite(share)) {
        const bar = document.createElement("span"); bar.className = "bar";
        const fill = document.createElement("span"); fill.style.width = Math.min(100, 100 * share) + "%";
        bar.appendChild(fill); td.appendChild(bar);
      }
      tbody.appendChild(row);
    }
  }
}
function gpus(list) {
  const box = document.getElementById("gpus"); box.replaceChildren();
  for (const item of list.items) {
    const name = item.node || (item.metadata || {}).name;
    const node = document.createElement("div"); node.className = "node"; node.dataset.node = name;
    const title = document.createElement("h3"); title.textContent = name; node.appendChild(title);
    if ((item.domains || []).length) {
      const domains = document.createElement("div"); domains.className = "domains";
      domains.textContent = "domains: " + item.domains.map(text).join(", "); node.appendChild(domains);
    }
    for (const device of item.devices || []) {
      const gpu = document.createElement("div");
      const holders = device.holders || [];
      const free = device.freeMemoryMiB, total = device.memoryMiB;
      gpu.className = "gpu " + (!holders.length ? "free" : (free > 0 ? "part" : "busy"));
      gpu.dataset.gpu = name + "/" + device.index;
      const island = device.island === null || device.island === undefined ? "" : " island " + device.island;
      gpu.textContent = "GPU " + device.index + " " + text(device.model) + island
        + " - free " + text(free) + " of " + text(total) + " MiB";
      for (const holder of holders) {
        const span = document.createElement("span"); span.className = "holder";
        const share = holder.memoryMiB ? holder.memoryMiB + " MiB"
          : (holder.fraction ? holder.fraction : "whole");
        span.textContent = text(holder.namespace) + "/" + text(holder.name) + " (" + share + ")";
        gpu.appendChild(span);
      }
      node.appendChild(gpu);
    }
    box.appendChild(node);
  }
}
function decisions(list) {
  const tbody = body("decisions");
  for (const item of list.items) {
    const row = document.createElement("tr"); row.dataset.pod = item.pod;
    cell(row, item.time); cell(row, item.pod); cell(row, item.result); cell(row, item.node);
    cell(row, item.message); tbody.appendChild(row);
  }
}
const COLORS = ["#2a6fdb", "#d9534f", "#3c9a5f", "#e08e0b", "#7b4fc4", "#1aa3a3", "#8a6d3b", "#555"];
function usage(list) {
  const svg = document.getElementById("chart"); svg.replaceChildren();
  const tbody = body("usage-totals");
  document.getElementById("usage-range").textContent = list.since + " to " + list.until
    + ", GPU-hours per " + Math.round(list.stepSeconds / 60) + " min";
  const peak = Math.max(1e-9, ...list.items.flatMap(item => item.series));
  list.items.forEach((item, n) => {
    const color = COLORS[n % COLORS.length], count = Math.max(1, item.series.length - 1);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", item.series.map((v, i) =>
      (10 + 620 * i / count).toFixed(1) + "," + (190 - 180 * v / peak).toFixed(1)).join(" "));
    line.setAttribute("stroke", color); line.dataset.key = item.key; svg.appendChild(line);
    const row = document.createElement("tr"); row.dataset.key = item.key;
    const swatch = cell(row, "\u25a0"); swatch.style.color = color;
    cell(row, item.key || "(none)"); cell(row, Number(item.gpuHours.toPrecision(3)), "num");
    cell(row, Number(item.cpuHours.toPrecision(3)), "num"); cell(row, item.pods, "num");
    tbody.appendChild(row);
  });
}
async function refresh() {
  errors.length = 0;
  const [p, q, g, d] = await Promise.all(["pendingpods", "quotas", "gpus", "decisions"].map(get));
  if (p) pending(p); if (q) quotas(q); if (g) gpus(g); if (d) decisions(d);
  const u = await get("usage?since=24h&by=user&step=1h");
  if (u) usage(u);
  document.getElementById("error").textContent = errors.join("\\n");
  document.getElementById("updated").textContent = new Date().toISOString();
}
refresh(); setInterval(refresh, 2000);
</script>
</body>
</html>
"""


def page() -> str:
    """The page's HTML (self-contained)."""
    return PAGE
