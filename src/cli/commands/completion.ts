/**
 * `vessel completion bash|zsh`: a completion script generated from the commander tree itself,
 * so that it cannot miss a command or an option. Both scripts share the tables (shell `case`
 * functions, the same syntax in both shells) and walk the words typed the same way; only the
 * last step differs: bash fills COMPREPLY, zsh calls _describe with the descriptions. An
 * argument named <runtime> completes with the names `vessel runtime ls --quiet` prints.
 */
import type { Command, Option } from 'commander';
import { UsageError } from '../shared/exit-codes.js';

interface Node {
  /** Canonical subcommand names from the root, space-separated; '' for the root. */
  path: string;
  command: Command;
}

function walk(command: Command, path = ''): Node[] {
  return [{ path, command }, ...command.commands.flatMap((sub) => walk(sub, path === '' ? sub.name() : `${path} ${sub.name()}`))];
}

/** Quoted for a shell: single quotes, with any single quote written as '\''. */
const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;

/** `name:description`, as zsh's _describe takes it (a colon in the name is escaped). */
const described = (name: string, description: string): string => `${name.replaceAll(':', '\\:')}:${description.split('\n')[0]}`;

const visibleOptions = (command: Command): readonly Option[] => command.options.filter((o) => !o.hidden);

const flagsOf = (option: Option): string[] => [option.short, option.long].filter((f): f is string => f !== undefined);

/** A shell function: `case "$1" in` each path `) printf …;;`. Paths with nothing to say are left out. */
function table(name: string, nodes: Node[], lines: (node: Node) => string[]): string {
  const cases = nodes
    .map((node) => [node.path, lines(node)] as const)
    .filter(([, l]) => l.length > 0)
    .map(([path, l]) => `    ${quote(path)}) printf '%s\\n' ${l.map(quote).join(' ')} ;;`);
  return `${name}() {\n  case "$1" in\n${cases.join('\n')}\n  esac\n}\n`;
}

function tables(program: Command): string {
  const nodes = walk(program);
  const subs = table('_vessel_subs', nodes, ({ command }) =>
    command.commands.flatMap((sub) => [sub.name(), ...sub.aliases()].map((n) => described(n, sub.description()))),
  );
  // Aliases lead to the canonical name, so that `runtime list` finds the options of `runtime ls`.
  const canonical = table('_vessel_canonical', nodes, ({ command }) => command.commands.flatMap((sub) => [sub.name(), ...sub.aliases()].map((n) => `${n}=${sub.name()}`)));
  const options = table('_vessel_options', nodes, ({ command }) => [
    ...visibleOptions(command).flatMap((o) => flagsOf(o).map((f) => described(f, o.description))),
    described('--help', 'show help'),
  ]);
  const valued = table('_vessel_valued', nodes, ({ command }) => visibleOptions(command).filter((o) => o.required || o.optional).flatMap(flagsOf));
  const firstArg = table('_vessel_first_arg', nodes, ({ command }) => {
    const first = command.registeredArguments[0]?.name();
    return first === undefined ? [] : [first];
  });
  return subs + canonical + options + valued + firstArg;
}

/**
 * Sets `_vessel_path` (the command typed so far), `_vessel_args` (its arguments before the word
 * being completed), `_vessel_rest` (1 after `--`) and `_vessel_prev_valued` (1 when the previous
 * word is an option that takes a value) from the words before the current one, given as "$@".
 */
const WALK = `_vessel_walk() {
  _vessel_path='' _vessel_args=0 _vessel_rest=0 _vessel_prev_valued=0
  local word sub pair skip=0
  for word in "$@"; do
    _vessel_prev_valued=0
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    if [ "$_vessel_rest" = 1 ]; then continue; fi
    case "$word" in
      --) _vessel_rest=1; continue ;;
      --*=*) continue ;;
      -*)
        if _vessel_valued "$_vessel_path" | grep -qxF -- "$word"; then skip=1; _vessel_prev_valued=1; fi
        continue ;;
    esac
    sub=''
    for pair in $(_vessel_canonical "$_vessel_path"); do
      if [ "\${pair%%=*}" = "$word" ]; then sub="\${pair#*=}"; fi
    done
    if [ -n "$sub" ] && [ "$_vessel_args" = 0 ]; then
      _vessel_path="\${_vessel_path:+$_vessel_path }$sub"
    else
      _vessel_args=$((_vessel_args + 1))
    fi
  done
}
`;

function bashScript(program: Command): string {
  return `# bash completion for vessel: eval "$(vessel completion bash)", e.g. in ~/.bashrc
${tables(program)}${WALK}
_vessel_complete() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" line
  _vessel_walk "\${COMP_WORDS[@]:1:COMP_CWORD-1}"
  COMPREPLY=()
  if [ "$_vessel_rest" = 1 ] || [ "$_vessel_prev_valued" = 1 ]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  elif [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_vessel_options "$_vessel_path" | while IFS= read -r line; do printf '%s\\n' "\${line%%:*}"; done)" -- "$cur"))
  elif [ "$_vessel_args" = 0 ] && [ -n "$(_vessel_subs "$_vessel_path")" ]; then
    COMPREPLY=($(compgen -W "$(_vessel_subs "$_vessel_path" | while IFS= read -r line; do printf '%s\\n' "\${line%%:*}"; done)" -- "$cur"))
  elif [ "$_vessel_args" = 0 ] && [ "$(_vessel_first_arg "$_vessel_path")" = runtime ]; then
    COMPREPLY=($(compgen -W "$(vessel runtime ls --quiet 2>/dev/null)" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o default -F _vessel_complete vessel
`;
}

function zshScript(program: Command): string {
  return `#compdef vessel
# zsh completion for vessel: eval "$(vessel completion zsh)" after compinit, e.g. in ~/.zshrc,
# or save it as _vessel in a directory of $fpath.
${tables(program)}${WALK}
_vessel() {
  local -a choices
  _vessel_walk "\${(@)words[2,CURRENT-1]}"
  if [[ $_vessel_rest = 1 || $_vessel_prev_valued = 1 ]]; then
    _files
  elif [[ $PREFIX == -* ]]; then
    choices=("\${(@f)$(_vessel_options "$_vessel_path")}")
    _describe -t options option choices
  elif [[ $_vessel_args = 0 && -n "$(_vessel_subs "$_vessel_path")" ]]; then
    choices=("\${(@f)$(_vessel_subs "$_vessel_path")}")
    _describe -t commands command choices
  elif [[ $_vessel_args = 0 && "$(_vessel_first_arg "$_vessel_path")" = runtime ]]; then
    choices=("\${(@f)$(vessel runtime ls --quiet 2>/dev/null)}")
    compadd -a choices
  else
    _files
  fi
}
if [[ "\${zsh_eval_context[-1]}" == loadautofunc ]]; then _vessel "$@"; else compdef _vessel vessel; fi
`;
}

export function registerCompletionCommand(program: Command): void {
  program
    .command('completion')
    .description('print a shell completion script')
    .argument('<shell>', 'bash or zsh')
    .addHelpText('after', '\nSet up:\n  bash: echo \'eval "$(vessel completion bash)"\' >> ~/.bashrc\n  zsh:  echo \'eval "$(vessel completion zsh)"\' >> ~/.zshrc   (after compinit)')
    .action((shell: string) => {
      if (shell === 'bash') process.stdout.write(bashScript(program));
      else if (shell === 'zsh') process.stdout.write(zshScript(program));
      else throw new UsageError(`no completion for '${shell}': bash or zsh`);
    });
}
