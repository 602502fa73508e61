"""Every ``lat-tui`` subcommand, its one-line help and the module that runs it: the top-level
``--help``, the dispatcher and the shell completion are all built from this table."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from lat_tui import control_cli, inspect_cli, monitor_cli, notify_cli, warmup_cli, watch_cli


@dataclass(frozen=True)
class Verb:
    name: str
    module: str
    help: str
    takes_verb: bool  # its main(argv) and build_parser(verb) get the verb's name

    def parser(self) -> argparse.ArgumentParser:
        module = importlib.import_module(self.module)
        return module.build_parser(self.name) if self.takes_verb else module.build_parser()

    def run(self, argv: list[str]) -> int:
        main = importlib.import_module(self.module).main
        return main([self.name, *argv]) if self.takes_verb else main(argv)


def _table() -> tuple[Verb, ...]:
    own = [Verb("status", "lat_tui.status", "a run's job table, without the TUI (--json for scripts)", False),
           Verb("runs", "lat_tui.inspect_cli", inspect_cli.HELP["runs"], True),
           Verb("show", "lat_tui.inspect_cli", inspect_cli.HELP["show"], True),
           Verb("logs", "lat_tui.inspect_cli", inspect_cli.HELP["logs"], True),
           Verb("wait", "lat_tui.watch_cli", watch_cli.HELP["wait"], True),
           Verb("follow", "lat_tui.watch_cli", watch_cli.HELP["follow"], True)]
    control = [Verb(name, "lat_tui.control_cli", control_cli.HELP[name], True) for name in control_cli.VERBS]
    other = [Verb("suites", "lat_tui.suites_cli", "the suites a plan can name, and which config tree each comes from",
                  False),
             Verb("rerun", "lat_tui.rerun_cli", "run a finished job again from its folder, into a new folder",
                  False),
             Verb("monitor", "lat_tui.monitor_cli", monitor_cli.HELP, False),
             Verb("notify", "lat_tui.notify_cli", notify_cli.HELP, False),
             Verb("triage", "lat_tui.triage_cli", "why a job died: class, diagnosis, ranked remedies", False),
             Verb("results", "lat_tui.results_cli", "aggregate a run's outputs into tables and plots", False),
             Verb("warmup", "lat_tui.warmup_cli", warmup_cli.HELP, False),
             Verb("completion", "lat_tui.completion", "print a bash or zsh completion script", False)]
    return tuple(own + control + other)


VERBS: tuple[Verb, ...] = _table()
BY_NAME = {v.name: v for v in VERBS}


def verbs_help() -> str:
    width = max(len(v.name) for v in VERBS)
    return "subcommands (lat-tui SUBCOMMAND --help for its options):\n" + "\n".join(
        f"  {v.name.ljust(width)}  {v.help}" for v in VERBS)
