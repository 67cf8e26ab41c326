"""The web page (visibility/webui.py) in headless Chromium, through the API server as a user reaches it.

The visibility API is set up as in tests/e2e/test_e2e_visibility.py (deploy/visibility/ applied, the users'
roles, the daemon behind the aggregation layer); the browser opens the page's address on the API server
with the viewer's token, as `kubectl proxy` would send it, and reads what a person reads: the waiting
pods with their reason, a GPU's holder, and the page updating when a pod is bound. Playwright drives the
system's Chromium (Debian's `chromium`; no browser download): without it the test is skipped, unless
AI_SCHEDULER_REQUIRE_BROWSER is set (CI sets it, and installs Chromium). A screenshot is kept as a test
artifact (`test-artifacts/webui-<backend>.png`, or under AI_SCHEDULER_ARTIFACTS).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from backends import KubeCluster
from conftest import StartScheduler, create_all

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import AccountingSettings
from ai_scheduler.sim.controlplane import REPO
from e2e.test_e2e_gpus import Agents, gpu_cluster, share
from e2e.test_e2e_visibility import API, Gateway, KubeGateway, gateway, visibility_config, waiting

pytestmark = pytest.mark.e2e
__all__ = ["gateway", "gpu_cluster", "waiting"]  # the fixtures

TIMEOUT_MS = 30_000


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found:
        return found
    if os.environ.get("AI_SCHEDULER_REQUIRE_BROWSER"):
        raise AssertionError("no Chromium on PATH (apt-get install chromium), and this run requires it")
    pytest.skip("no Chromium on PATH (apt-get install chromium)")


def artifacts() -> Path:
    path = Path(os.environ.get("AI_SCHEDULER_ARTIFACTS") or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


async def test_the_page_shows_the_queue_and_gpu_holders_and_follows_bindings(
    gateway: Gateway, waiting: None, start_scheduler: StartScheduler, api: KubeClient, gpu_cluster: Agents,
    cluster: Any, tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright

    executable = chromium()
    accounting = AccountingSettings(f"sqlite:///{tmp_path / 'accounting.db'}", checkpoint_seconds=0.3)
    running = await start_scheduler(visibility_config(gateway.address), accounting=accounting)
    server = running.scheduler.visibility
    assert server is not None and server.port
    await gateway.route(server.port)
    if isinstance(gateway, KubeGateway):
        base, token = gateway.plane.url, gateway.plane.user_tokens["carol"]
    else:
        base, token = gateway.sim.url, gateway.tokens["carol"]
    backend = "kube" if isinstance(cluster, KubeCluster) else "sim"
    made = await api.request("POST", "/apis/ai-scheduler.io/v1alpha1/domains", body={
        "apiVersion": "ai-scheduler.io/v1alpha1", "kind": "Domain", "metadata": {"name": "fast-pool"},
        "spec": {"nodes": ["dgx-2"]}})
    assert made.ok, made.message

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            context = await browser.new_context(
                extra_http_headers={"Authorization": f"Bearer {token}"}, ignore_https_errors=True
            )
            page = await context.new_page()
            reply = await page.goto(f"{base}{API}/ui/")
            assert reply is not None and reply.status == 200
            assert await page.title() == "ai-scheduler"
            # A waiting pod and its reason, in the scheduler's order.
            row = page.locator('#pending tr[data-pod="team-a/a-0"]')
            await row.locator("td.reason").filter(has_text="Insufficient cpu").wait_for(timeout=TIMEOUT_MS)
            assert int(await row.locator("td").first.inner_text()) in (1, 2, 3)
            # The GPU share placed before the page loaded, on its device.
            holder = page.locator(".gpu .holder", has_text="default/slice")
            await holder.wait_for(timeout=TIMEOUT_MS)
            assert "10240 MiB" in await holder.inner_text()
            # The logical domain beside the node that belongs to it, and beside no other.
            await page.locator('.node[data-node="dgx-2"] .domains', has_text="domains: fast-pool").wait_for(
                timeout=TIMEOUT_MS)
            assert await page.locator(".node .domains").count() == 1
            # The quota table and the decisions are there too.
            await page.locator('#quotas tr[data-quota="group/research/cpu"]').wait_for(timeout=TIMEOUT_MS)
            await page.locator('#decisions tr[data-pod="default/slice"]').first.wait_for(timeout=TIMEOUT_MS)
            assert await page.locator("#error").inner_text() == ""
            # Use over time: the running GPU share's line in the chart, and its total beside it.
            await page.locator('#usage-totals tr[data-key=""]').wait_for(timeout=TIMEOUT_MS)
            line = page.locator('#chart polyline[data-key=""]')
            assert len((await line.get_attribute("points") or "").split()) == 24  # hourly over a day
            assert float(await page.locator('#usage-totals tr[data-key=""] td.num').first.inner_text()) > 0
            # A pod bound while the page is open appears as its GPU's holder without a reload.
            await create_all(api, [], [share("late", "20Gi")])
            await page.locator(".gpu .holder", has_text="default/late").wait_for(timeout=TIMEOUT_MS)
            await page.screenshot(path=str(artifacts() / f"webui-{backend}.png"), full_page=True)
        finally:
            await browser.close()
