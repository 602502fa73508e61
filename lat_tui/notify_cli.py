"""``lat-tui notify --event STARTED --group NAME --yaml FILE``: one e-mail notice, now.

The old ``python -m scripts.utils.email_notify --event STARTED --group smoketest --yaml
"$SWANLAB_EMAIL_YAML"``: checks a SwanLab e-mail YAML before a run relies on it. Exit 0 when the
server took the mail, 1 when it did not (why: one line on stderr, without the password), 2 for a
bad file or event.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from lat_core.front.client import EMAIL_YAML_VAR, OLD_EVENTS, mail_notice
from lat_tui.cli_common import EXIT_FAILED, EXIT_OK, cli_entry

HELP = "mail one notice with a SwanLab e-mail YAML (the old email_notify script), to check its settings"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui notify", description=HELP)
    p.add_argument("--event", required=True, type=str.upper, choices=sorted(OLD_EVENTS),
                   help="which notice to send")
    p.add_argument("--group", default="lat", help="the run or group the notice is about (its subject)")
    p.add_argument("--yaml", default=os.environ.get(EMAIL_YAML_VAR),
                   help=f"SwanLab e-mail settings (default ${EMAIL_YAML_VAR})")
    return p


@cli_entry("lat-tui notify")
def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.yaml:
        parser.error(f"--yaml FILE or ${EMAIL_YAML_VAR} is required")
    subject = f"LAT {args.group}: {args.event}"
    body = f"{args.event} notice for {args.group} from {socket.gethostname()} (lat-tui notify)."
    delivered, to = mail_notice(args.yaml, OLD_EVENTS[args.event], subject, body)
    if not delivered:
        print(f"lat-tui notify: the {args.event} notice was not delivered (see the line above)", file=sys.stderr)
        return EXIT_FAILED
    print(f"{args.event} notice for {args.group} mailed to {', '.join(to)}")
    return EXIT_OK
