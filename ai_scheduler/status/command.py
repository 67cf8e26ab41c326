"""`ai-scheduler status ...` and `kubectl ai-scheduler ...`: the command line for people.

One parser serves both: `ai-scheduler status` adds it under its own sub-command (cli.py), and the
console script `kubectl-ai_scheduler` (`plugin_main`) is the same parser on its own, which kubectl runs
for `kubectl ai-scheduler ARGS` with ARGS unchanged. So `kubectl ai-scheduler queue -n team-a` and
`ai-scheduler status queue -n team-a` are one command.

Every sub-command takes the connection flags kubectl users expect (`--kubeconfig`, `-n/--namespace`,
which defaults to the kubeconfig context's namespace, else `default`) and `-o table|json`: tables for
people, the API's own JSON (reads) or one object per pod acted on (writes) for scripts. Exit status: 0
when everything asked was done, 1 when anything was refused or failed (the reason on stderr), 2 for a
command line argparse rejects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.status import actions, tables
from ai_scheduler.status.actions import Outcome, StatusError, Target

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
WRITES = ("hold", "release", "requeue", "cancel")
DESCRIPTION = (
    "ai-scheduler for its users, with their own credentials (RBAC decides): the queue, why a pod waits, "
    "quotas, GPUs; hold, release, requeue and cancel pods and gangs. Installed also as the kubectl plugin "
    "kubectl-ai_scheduler: `kubectl ai-scheduler queue` is `ai-scheduler status queue`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sub-commands, on `ai-scheduler status` or on the kubectl plugin's own parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig with your credentials (default: $KUBECONFIG, else ~/.kube/config; "
                             "in a pod, its service account)")
    common.add_argument("-n", "--namespace", metavar="NS",
                        help="the namespace (default: the kubeconfig context's namespace, else 'default')")
    common.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="readable tables (default), or JSON for scripts")
    commands = parser.add_subparsers(dest="status_command", required=True, metavar="COMMAND")

    queue = commands.add_parser(
        "queue", parents=[common], help="pending pods in the scheduler's order",
        description="The pods waiting in ai-scheduler's queue, in the order it will try them: position "
        "overall and in their queue, priority (the active policy's score; * when promoted), attempts, "
        "expected start from the daemon's forecast, and the last reason it could not place them. Pods of "
        "namespaces you may not read are counted in positions but not named.")
    queue.add_argument("-A", "--all-namespaces", action="store_true",
                       help="the whole queue, not one namespace's pods")

    why = commands.add_parser(
        "why", parents=[common], help="why a pod or gang waits: its priority factors and reasons",
        description="For a waiting pod (NAME or pod/NAME) or every waiting member of a gang (gang/NAME): "
        "its place in the queue, its priority factor by factor (as Slurm's sprio), its run-time estimate, "
        "the last reason it could not be placed and its expected start (as squeue --start).")
    why.add_argument("target", metavar="POD|gang/NAME|task/NAME")

    commands.add_parser(
        "quota", parents=[common], help="your quota and your group's: used, min, max",
        description="The quotas that apply to you and your group, per resource: what is used now, the "
        "guaranteed minimum and the maximum, as the scheduler counts them.")

    gpus = commands.add_parser(
        "gpus", parents=[common], help="which pods hold which GPU, and how much of it",
        description="The GPUs ai-scheduler assigns itself (nodes labelled ai-scheduler.io/gpu-managed), "
        "from the scheduler's cache: per device its model, memory, free memory, NVLink island and the pods "
        "holding it (whole, a memory share or a fraction).")
    gpus.add_argument("node", metavar="NODE", nargs="?", help="one node only")

    texts = {
        "hold": ("keep pending pods from being scheduled",
                 "Hold pending pods: the scheduler does not try them until released. Kubernetes accepts "
                 "spec.schedulingGates only at a pod's creation, so the hold is the annotation "
                 "ai-scheduler.io/hold=\"true\", which ai-scheduler honours as a scheduling gate. A pod "
                 "already bound cannot be held."),
        "release": ("let held pods be scheduled again",
                    "Release held pods: removes the annotation ai-scheduler.io/hold and the scheduling gate "
                    "ai-scheduler.io/hold (a pod may be created with it). Other scheduling gates stay."),
        "requeue": ("retry pending pods now, resetting their backoff",
                    "Ask the scheduler to retry pending pods now: it moves them to the active queue and "
                    "starts their backoff over (annotation ai-scheduler.io/requeue-at)."),
        "cancel": ("delete pods, or whole gangs",
                   "Delete pods, or a whole gang at once: its PodGroup (if any) and every pod that names "
                   "the gang (the gang labels and annotations docs/users/gangs.md lists), with your own "
                   "credentials."),
    }
    for name in WRITES:
        summary, description = texts[name]
        command = commands.add_parser(name, parents=[common], help=summary, description=description)
        command.add_argument("targets", metavar="POD|gang/NAME|task/NAME", nargs="+",
                             help="NAME or pod/NAME for a pod, gang/NAME for every pod of a gang, "
                                  "task/NAME for a Task (its spec's suspend, requeueAt or cancel)")


def plugin_main(argv: list[str] | None = None) -> int:
    """The console script `kubectl-ai_scheduler`: `kubectl ai-scheduler ...`."""
    parser = argparse.ArgumentParser(prog="kubectl ai-scheduler", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one parsed command on a new event loop; its exit status."""
    return asyncio.run(_run(args, out or sys.stdout, err or sys.stderr))


async def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        namespace = args.namespace or context_namespace(args.kubeconfig)
        try:
            api = await KubeClient.connect(args.kubeconfig)
        except Exception as exc:  # kubernetes_asyncio's config errors have no common base we may import
            raise StatusError(f"cannot load the kubeconfig: {exc}") from exc
        try:
            return await _command(api, args, namespace, out, err)
        finally:
            await api.close()
    except StatusError as exc:
        print(f"error: {exc}" if not str(exc).startswith("Error from server") else str(exc), file=err)
        return 1


async def _command(api: KubeClient, args: argparse.Namespace, namespace: str, out: TextIO,
                   err: TextIO) -> int:
    command, as_json, now = args.status_command, args.output == "json", time.time()
    if command == "queue":
        body = await actions.pending_pods(api, None if args.all_namespaces else namespace)
        _print(out, body if as_json else tables.queue_table(body, now, all_namespaces=args.all_namespaces))
    elif command == "why":
        target = Target.parse(args.target)
        items = await actions.why(api, namespace, target)
        gang = f"{namespace}/{target.name}" if target.kind == "gang" else None
        if as_json:  # the PendingPod itself, or the gang's members as a PendingPodList
            _print(out, items[0] if gang is None else {"apiVersion": actions.VISIBILITY_VERSION,
                                                       "kind": "PendingPodList", "metadata": {},
                                                       "items": items})
        else:
            _print(out, tables.why_text(items, now, gang=gang))
    elif command == "quota":
        body = await actions.visibility(api, "/quotas")
        _print(out, body if as_json else tables.quota_table(body))
    elif command == "gpus":
        body = await actions.visibility(api, f"/gpus/{args.node}" if args.node else "/gpus")
        _print(out, body if as_json else tables.gpus_table(body))
    else:
        return await _write(api, command, namespace, [Target.parse(t) for t in args.targets], as_json,
                            out, err)
    return 0


async def _write(api: KubeClient, command: str, namespace: str, targets: list[Target], as_json: bool,
                 out: TextIO, err: TextIO) -> int:
    """Act on every target; a refusal of one pod does not stop the others, an API error stops all."""
    outcomes: list[Outcome] = []
    try:
        for target in targets:
            if target.kind == "task":
                outcomes.append(await actions.task_action(api, command, namespace, target.name))
                continue
            if command == "cancel":
                outcomes += await actions.cancel(api, namespace, target)
                continue
            act = {"hold": actions.hold, "release": actions.release, "requeue": actions.requeue}[command]
            for pod in await actions.pods_of(api, namespace, target):
                outcomes.append(await act(api, pod))
    finally:
        if as_json:
            _print(out, {"items": [o.as_json() for o in outcomes]})
        else:
            for outcome in outcomes:
                print(outcome if outcome.ok else f"error: {outcome}", file=out if outcome.ok else err)
    return 0 if all(o.ok for o in outcomes) else 1


def _print(out: TextIO, value: str | dict[str, Any]) -> None:
    print(value if isinstance(value, str) else json.dumps(value, indent=2), file=out)


def context_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context, as kubectl finds it: --kubeconfig, else the
    files of $KUBECONFIG (the first that sets current-context wins), else ~/.kube/config; in a pod
    without any, the service account's namespace; else `default`."""
    if kubeconfig:
        paths = [Path(kubeconfig)]
    elif os.environ.get("KUBECONFIG"):
        paths = [Path(p) for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        paths = [Path.home() / ".kube" / "config"]
    documents = []
    for path in paths:
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(loaded, dict):
            documents.append(loaded)
    current = next((d["current-context"] for d in documents if d.get("current-context")), None)
    for document in documents:
        for context in document.get("contexts") or ():
            if isinstance(context, dict) and context.get("name") == current:
                namespace = (context.get("context") or {}).get("namespace")
                return str(namespace) if namespace else "default"
    if not documents and IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    return "default"
