"""Make the console screenshots of docs/ from a running `./dev up` stack (its demo data and demo traffic):

    ./dev up                                  # wait a few minutes so the plots have some history
    .venv/bin/python docs/screenshots.py      # writes docs/console-cluster.png and docs/console-alerts.png

- `console-cluster.png`: cluster dev-a's page with its plots, as SRE `sre-carol` sees it.
- `console-alerts.png`: the alerts page with a firing alert. As the SRE, the script adds an authentication-failure
  rule on dev-a through the alerts page's form; then it connects to dev-a's broker three times as the demo
  producer app with a wrong secret (a misconfigured client). Prometheus fires the rule, and the page shows it.

Same port base as `./dev up` (SWITCHYARD_PORT_BASE); Debian's Chromium driven by Playwright (tests/support/browser.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker_core.client import BrokerError, Producer  # noqa: E402
from devstack.__main__ import DEMO_PASSWORD, state_for  # noqa: E402
from devstack.waiting import wait_for  # noqa: E402
from tests.support.browser import launch, login  # noqa: E402

CLUSTER = "dev-a"
SRE = "sre-carol"
RULE = "dev-a: authentication failures"
PRODUCER_APP = "payments-demo"


def fail_authentications(zk: str, times: int) -> None:
    for _ in range(times):
        try:
            with Producer(app_id=PRODUCER_APP, secret="not-the-secret", zk=f"{zk}/switchyard/{CLUSTER}",
                          client_id="screenshot-misconfigured", connect_timeout=5) as producer:
                producer.send("payments.demo-orders", b"{}", message_type="order.created")
        except (BrokerError, OSError, TimeoutError) as exc:
            print(f"refused, as expected: {exc}")


def add_rule(page, base: str) -> None:
    page.goto(f"{base}/alerts/")
    if page.get_by_test_id("alert-rules").locator("tbody tr", has_text=RULE).count():
        return  # made by an earlier run
    page.get_by_test_id("rule-new").click()
    page.fill("#id_name", RULE)
    page.select_option("#id_kind", "auth_failures")
    page.select_option("#id_cluster", CLUSTER)
    page.fill("#id_threshold", "0")
    page.fill("#id_for_seconds", "0")
    page.fill("#id_webhook_urls", "")
    page.get_by_test_id("rule-submit").click()
    page.wait_for_url(f"{base}/alerts/")


def firing(page, base: str) -> bool:
    page.goto(f"{base}/alerts/")
    return page.get_by_test_id("firing-alerts").locator("tbody tr", has_text=RULE).count() > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--range", default="15m", choices=["15m", "1h", "6h", "24h"], help="the plots' time range")
    args = parser.parse_args()
    state, ports = state_for("dev")
    env = json.loads((state / "env.json").read_text())
    base = f"http://127.0.0.1:{ports.web}"

    with sync_playwright() as playwright:
        context = launch(playwright)
        page = context.new_page()
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.set_default_timeout(30000)
        login(page, base, SRE, DEMO_PASSWORD)

        page.goto(f"{base}/clusters/{CLUSTER}/")
        page.wait_for_function("document.querySelector('[data-testid=plots]').dataset.state === 'drawn'")
        page.get_by_test_id("plot-range").select_option(args.range)
        page.wait_for_function(f"document.querySelector('[data-testid=plots]').dataset.range === '{args.range}'")
        page.screenshot(path=str(args.out / "console-cluster.png"), full_page=True)
        print(f"wrote {args.out / 'console-cluster.png'}")

        add_rule(page, base)
        fail_authentications(env["SWITCHYARD_ZK"], 3)
        print("waiting for Prometheus to fire the rule (its scrape and evaluation intervals are 15 s)")
        wait_for(lambda: firing(page, base), 180, "the authentication-failure alert to fire")
        page.screenshot(path=str(args.out / "console-alerts.png"), full_page=True)
        print(f"wrote {args.out / 'console-alerts.png'}")
        context.close()


if __name__ == "__main__":
    main()
