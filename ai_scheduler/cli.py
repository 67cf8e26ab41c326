"""The `ai-scheduler` command: `run` (the daemon), `agent` (the node agent), `demo` (the scheduler
against a simulated cluster) and `simulate` (the scheduling core over a trace, on a simulated clock)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ai_scheduler import __version__
from ai_scheduler.config import ConfigError, default_config, load_config
from ai_scheduler.log import LEVELS, JsonLogger


def _connection_arguments(command: argparse.ArgumentParser) -> None:
    """How a long-running sub-command reaches the API server, and how much it logs."""
    command.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file to reach the API server")
    command.add_argument(
        "--master", metavar="URL", help="API server URL without credentials (overrides --kubeconfig)"
    )
    command.add_argument(
        "--log-level",
        choices=sorted(LEVELS, key=LEVELS.__getitem__),
        default="info",
        help="lowest level written to the JSON log on stdout (default: info)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ai-scheduler",
        description="A Kubernetes scheduler for AI and deep-learning clusters. It schedules every pod whose "
        "spec.schedulerName names one of its profiles (default: ai-scheduler).",
    )
    parser.add_argument("--version", action="version", version=f"ai-scheduler {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run the scheduler daemon",
        description="Run the scheduler daemon. In a pod it uses the in-cluster service "
        "account unless --kubeconfig or --master says otherwise.",
    )
    run.add_argument(
        "--config",
        metavar="FILE",
        help="YAML config file; reloaded when it changes (default: built-in defaults)",
    )
    _connection_arguments(run)

    agent = commands.add_parser(
        "agent",
        help="run the node agent that reports the node's GPUs",
        description="Read the node's GPUs with NVML and keep the node annotations ai-scheduler.io/gpus and "
        "ai-scheduler.io/gpus-updated current: written when a device changes, used memory or utilization "
        "moves past a threshold, or a heartbeat is due. Without an NVIDIA driver it reports zero GPUs and "
        "keeps retrying. In a pod it uses the in-cluster service account unless --kubeconfig or --master "
        "says otherwise.",
    )
    agent.add_argument(
        "--node-name",
        metavar="NAME",
        default=os.environ.get("NODE_NAME") or None,
        help="the node to report on (default: $NODE_NAME, set from spec.nodeName by the DaemonSet)",
    )
    _connection_arguments(agent)
    agent.add_argument(
        "--interval",
        metavar="S",
        type=_positive_seconds,
        default=10.0,
        help="seconds between two readings of the GPUs (default: 10)",
    )
    agent.add_argument(
        "--heartbeat",
        metavar="S",
        type=_positive_seconds,
        default=60.0,
        help="write the report at least this often, changed or not, so the scheduler can tell it is "
        "live (default: 60)",
    )

    demo = commands.add_parser(
        "demo",
        help="run the real scheduler against an embedded simulated cluster",
        description="Start an embedded simulated Kubernetes cluster (API server over HTTP "
        "on 127.0.0.1 and simulated kubelets), submit a mixed workload, run "
        "the real scheduler against it and print what happened.",
    )
    demo.add_argument("--nodes", type=int, default=6, help="number of nodes (default: 6)")
    demo.add_argument("--pods", type=int, default=60, help="number of workload pods (default: 60)")
    demo.add_argument("--seed", type=int, default=7, help="random seed of the workload (default: 7)")
    demo.add_argument(
        "--log-file",
        metavar="FILE",
        help="write the scheduler's JSON log here (default: kept out of the way)",
    )

    simulate = commands.add_parser(
        "simulate",
        help="run the scheduling core over a trace on a simulated clock",
        description="Run the daemon's scheduling core (queue, policies, quotas, gangs, filters and scores, "
        "GPU choice, preemption, reservations and backfill) over a workload trace on a cluster file, on a "
        "simulated clock, and report waits, completion times, GPU allocation and fragmentation.",
    )
    from ai_scheduler.tracesim.command import add_arguments

    add_arguments(simulate)

    tune = commands.add_parser(
        "tune",
        help="search a policy's weights in simulation for an objective",
        description="Search the weights of a priority policy (Optuna's TPE, a fixed number of seeded trials, "
        "each a simulation of the trace) for an objective over the simulator's figures, such as "
        "'minimize levels[1].wait_mean subject to jain_groups >= 0.95 and gpu_alloc_mean >= "
        "fifo.gpu_alloc_mean', and write the best policy as a config fragment.",
    )
    from ai_scheduler.tracesim.tune import add_arguments as add_tune_arguments

    add_tune_arguments(tune)

    learn = commands.add_parser(
        "learn",
        help="fit the run-time model on a trace and report its error",
        description="Fit a run-time model (a median and an upper quantile) on the completed jobs of a "
        "trace, score it on the latest jobs against the users' estimates and their past jobs' mean, and "
        "write it for the daemon's prediction.model.",
    )
    from ai_scheduler.tracesim.learn import add_arguments as add_learn_arguments

    add_learn_arguments(learn)

    from ai_scheduler.status.command import DESCRIPTION as STATUS_DESCRIPTION
    from ai_scheduler.status.command import add_arguments as add_status_arguments

    status = commands.add_parser(
        "status",
        help="the queue, quotas and GPUs for users; hold, release, requeue and cancel their pods",
        description=STATUS_DESCRIPTION,
    )
    add_status_arguments(status)

    replay = commands.add_parser(
        "replay",
        help="rebuild a cluster and workload from the daemon's log and run them again",
        description="Read the daemon's JSON-lines log (format v1: nodes, pods, decisions, completions, the "
        "config), rebuild the cluster and the workload, run them through the simulator under the logged "
        "config and compare its placements with the daemon's; with --config, also run another config and "
        "print the differences in the simulator's figures.",
    )
    from ai_scheduler.tracesim.replay import add_arguments as add_replay_arguments

    add_replay_arguments(replay)

    from ai_scheduler.accounting.command import DESCRIPTION as USAGE_DESCRIPTION
    from ai_scheduler.accounting.command import add_arguments as add_usage_arguments

    usage = commands.add_parser("usage", help="what pods used, from the accounting database",
                                description=USAGE_DESCRIPTION)
    add_usage_arguments(usage)

    policy = commands.add_parser(
        "admission-policy",
        help="print the ValidatingAdmissionPolicy that refuses pods that can never fit a quota",
        description="Print, as YAML for kubectl apply, a ValidatingAdmissionPolicy and its binding generated "
        "from the config: the API server then refuses at creation a pod (or a gang, by its min-available) "
        "that asks more than its user's, group's or queue's max, instead of leaving it Unschedulable "
        "forever; and a second policy that does the same for the max of the ElasticQuota objects of the "
        "pod's namespace (in namespaces the config does not map). Generate and apply it again whenever the "
        "config's tenancy or quotas change. Needs Kubernetes 1.34 or newer.",
    )
    policy.add_argument("--config", metavar="FILE", help="YAML config file (default: built-in defaults)")
    policy.add_argument(
        "--name", default="ai-scheduler-quota",
        help="name of the policy and its binding (default: %(default)s)",
    )
    policy.add_argument(
        "--no-elastic-quotas",
        action="store_true",
        help="leave out the second policy, which holds pods to the ElasticQuota objects of their namespace",
    )
    policy.add_argument(
        "--no-gangs",
        action="store_true",
        help="judge each pod alone, not by its request times its gang's min-available (for gangs whose "
        "members ask differently, such as an MPI launcher beside its workers)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "agent":
        return _agent(args)
    if args.command == "learn":
        from ai_scheduler.tracesim.learn import run as learn

        return learn(args)
    if args.command == "simulate":
        from ai_scheduler.tracesim.command import run as simulate

        return simulate(args)
    if args.command == "status":
        from ai_scheduler.status.command import run as status

        return status(args)
    if args.command == "replay":
        from ai_scheduler.tracesim.replay import run as replay

        return replay(args)
    if args.command == "usage":
        from ai_scheduler.accounting.command import run as usage_report

        return usage_report(args)
    if args.command == "admission-policy":
        return _admission_policy(args)
    if args.command == "tune":
        from ai_scheduler.tracesim.tune import run as tune

        return tune(args)
    import uvloop

    from ai_scheduler.demo import run_demo

    return uvloop.run(run_demo(nodes=args.nodes, pods=args.pods, seed=args.seed, log_file=args.log_file))


def _run(args: argparse.Namespace) -> int:
    import uvloop

    from ai_scheduler.daemon.app import run_scheduler
    from ai_scheduler.tracesim.forecast import forecaster

    logger = JsonLogger(level=args.log_level, batch=True)
    try:
        config = load_config(args.config) if args.config else default_config()
    except ConfigError as exc:
        logger.error("config.invalid", path=args.config, error=str(exc))
        print(f"ai-scheduler: invalid config: {exc}", file=sys.stderr)
        return 2
    try:
        return uvloop.run(  # 1 when the leader election's Lease was lost, as kube-scheduler exits
            run_scheduler(
                config,
                kubeconfig=args.kubeconfig,
                master=args.master,
                logger=logger,
                config_path=args.config,
                forecaster=forecaster,
            )
        )
    finally:
        logger.flush()  # lines of the loop's last step


def _admission_policy(args: argparse.Namespace) -> int:
    from ai_scheduler.cache.admission_policy import admission_policy, render

    try:
        config = load_config(args.config) if args.config else default_config()
    except ConfigError as exc:
        print(f"ai-scheduler: invalid config: {exc}", file=sys.stderr)
        return 2
    documents = admission_policy(
        config, name=args.name, gangs=not args.no_gangs, elastic_quotas=not args.no_elastic_quotas
    )
    sys.stdout.write(render(documents, args.config or "the built-in defaults"))
    return 0


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _agent(args: argparse.Namespace) -> int:
    import uvloop

    from ai_scheduler.agent import run_agent

    logger = JsonLogger(level=args.log_level)
    if not args.node_name:
        logger.error("agent.no_node_name", error="neither --node-name nor NODE_NAME is set")
        print("ai-scheduler agent: give --node-name or set NODE_NAME", file=sys.stderr)
        return 2
    uvloop.run(
        run_agent(
            args.node_name,
            kubeconfig=args.kubeconfig,
            master=args.master,
            interval=args.interval,
            heartbeat=args.heartbeat,
            logger=logger,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
