"""`python -m broker_core --cluster NAME --zk HOST:PORT/CHROOT --data-dir DIR --port N [--metrics-port M]`."""

from __future__ import annotations

import logging
import sys

from broker_core.log_scrub import scrub_root_logger
from broker_core.node.broker import run
from broker_core.node.options import parse


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    logging.basicConfig(level=options.log_level.upper(),
                        format=f"%(asctime)s broker[{options.cluster}:{options.port}] %(levelname)s %(name)s: %(message)s")
    scrub_root_logger()  # secrets (the admin token, ZooKeeper credentials) never reach the log
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    run(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
