"""``lat-tui completion bash|zsh``: a completion script for the subcommands and their options,
built from the same parsers the commands use (zsh runs it through its bash compatibility)."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lat-tui completion", description="print a shell completion script",
                                epilog="bash: eval \"$(lat-tui completion bash)\" in ~/.bashrc; "
                                       "zsh: eval \"$(lat-tui completion zsh)\" in ~/.zshrc")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    print(script(args.shell))
    return 0


def options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for action in parser._actions if action.help != argparse.SUPPRESS
                  for o in action.option_strings)  # argparse keeps its actions only here


def script(shell: str) -> str:
    from lat_tui.cli import build_parser as top_parser
    from lat_tui.verbs import VERBS

    cases = "\n".join(f"    {v.name}) opts=\"{' '.join(options(v.parser()))}\" ;;" for v in VERBS)
    first = " ".join([*(v.name for v in VERBS), *options(top_parser())])
    body = f"""_lat_tui() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" opts
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{first}" -- "$cur"))
    return
  fi
  case "${{COMP_WORDS[1]}}" in
{cases}
    *) opts="{' '.join(options(top_parser()))}" ;;
  esac
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F _lat_tui lat-tui"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body
