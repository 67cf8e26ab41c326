"""`python -m ai_scheduler.sim`: the simulated cluster in its own process.

Benchmarks run it apart from the scheduler so that the two do not share one
event loop; the first stdout line (`{"url": ...}`) tells the parent where it is.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import orjson
import uvloop

from ai_scheduler.log import JsonLogger
from ai_scheduler.sim.apiserver import SimApiServer
from ai_scheduler.sim.objects import write_kubeconfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ai_scheduler.sim",
                                     description="Run the simulated Kubernetes API server, kubelets and "
                                                 "node lifecycle controller on loopback.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    parser.add_argument("--no-kubelets", action="store_true", help="no simulated kubelets: bound pods stay "
                                                                   "Pending, deleted ones stay Terminating")
    parser.add_argument("--no-node-controller", action="store_true",
                        help="no node lifecycle controller: the not-ready taint stays on new nodes")
    parser.add_argument("--bookmark-interval", type=float, default=1.0, metavar="S",
                        help="seconds between watch bookmarks (default 1.0)")
    parser.add_argument("--kubeconfig-out", metavar="FILE", help="write a kubeconfig for the server to FILE")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                        help="level of the JSON log on stderr (default warning)")
    return parser


async def _serve(args: argparse.Namespace) -> None:
    logger = JsonLogger(stream=sys.stderr.buffer, level=args.log_level, component="sim")
    server = SimApiServer(kubelets=not args.no_kubelets, node_controller=not args.no_node_controller,
                          bookmark_interval=args.bookmark_interval, logger=logger)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    url = await server.start(args.host, args.port)
    try:
        if args.kubeconfig_out:
            write_kubeconfig(url, args.kubeconfig_out)
        sys.stdout.buffer.write(orjson.dumps({"url": url}) + b"\n")
        sys.stdout.buffer.flush()
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    uvloop.run(_serve(_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
