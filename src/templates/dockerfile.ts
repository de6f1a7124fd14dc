/**
 * A Dockerfile, parsed and checked. dockerfile-ast (the parser of the Docker language server) does
 * the lexical work: lines, continuations, comments, the `escape` directive, each instruction's
 * keyword, flags and argument text with its line. On top of it this module applies Docker's rules:
 * which instructions exist and what their arguments mean, the exec and shell forms, stages, and
 * (in `planBuild`) ARG and ENV scoping with variable substitution (shell-words.ts).
 *
 * Two phases, because ENV may refer to the base image's variables (`ENV PATH=/x:$PATH`):
 * `parseDockerfile` needs only the text; `baseImages` names the images the target stage stands
 * on, whose configs the caller fetches; `planBuild` then resolves every step.
 *
 * Bad input is an `invalid_argument` that names the line. What we do not support yet is refused
 * the same way, never ignored.
 */
import { posix } from 'node:path';
import { DockerfileParser, type Instruction } from 'dockerfile-ast';
import { VesselError } from '../core/errors.js';
import { expandWord, splitWords, WordError, type Lookup } from './shell-words.js';

/**
 * Real Dockerfiles are a few KiB. dockerfile-ast is linear but not cheap (a few µs a byte, most of
 * it in its argument splitting): at this cap the worst shapes (one long continuation, one huge
 * JSON array) parse in about a second here, and ordinary files in milliseconds.
 */
export const MAX_DOCKERFILE_BYTES = 128 * 1024;
/** Docker's own limit on the layers of an image (overlayfs's); each RUN, COPY, ADD and WORKDIR is one. */
export const MAX_LAYER_STEPS = 127;
/** The environment a RUN gets: the kernel refuses an exec whose argv and env pass ~2 MiB. */
export const MAX_ENV_BYTES = 1024 * 1024;

export class DockerfileError extends VesselError {
  /** 1-based, or null for the file as a whole. */
  readonly line: number | null;
  constructor(line: number | null, message: string) {
    super('invalid_argument', line === null ? `Dockerfile: ${message}` : `Dockerfile line ${line}: ${message}`);
    this.line = line;
  }
}

/** A command as RUN, CMD and ENTRYPOINT take it: JSON exec form, or text for the shell. */
export type CommandForm = { form: 'exec'; argv: string[] } | { form: 'shell'; text: string };

/** One instruction of a stage, its words not yet expanded (planBuild does that). */
export type ParsedInstruction =
  | { line: number; keyword: 'RUN' | 'CMD' | 'ENTRYPOINT'; command: CommandForm }
  | { line: number; keyword: 'SHELL'; argv: string[] }
  | { line: number; keyword: 'COPY' | 'ADD'; words: string[]; chown: string | null; chmod: string | null; from: string | null }
  | { line: number; keyword: 'ENV' | 'LABEL'; pairs: [string, string][] }
  | { line: number; keyword: 'ARG'; args: ArgDeclaration[] }
  | { line: number; keyword: 'WORKDIR' | 'USER'; text: string }
  | { line: number; keyword: 'EXPOSE'; words: string[] };

export interface ArgDeclaration {
  name: string;
  /** The default's unexpanded word, or null for `ARG NAME`. */
  default: string | null;
}

export interface ParsedStage {
  line: number;
  /** The image word of FROM, unexpanded (global ARGs apply). */
  from: string;
  platform: string | null;
  name: string | null;
  instructions: ParsedInstruction[];
}

export interface Warning {
  line: number | null;
  message: string;
}

export interface ParsedDockerfile {
  escape: string;
  /** ARGs before the first FROM: they may be used in FROM lines, and inherited by `ARG NAME` in a stage. */
  globalArgs: { line: number; args: ArgDeclaration[] }[];
  stages: ParsedStage[];
  warnings: Warning[];
}

/** The instructions Docker has that a template cannot honour, with why. */
const REFUSED: Record<string, string> = {
  VOLUME: 'VOLUME is not supported: a template has one disk; create the directory with RUN mkdir',
  HEALTHCHECK: "HEALTHCHECK is not supported: give the start command's ready check with the build's ready_cmd or ready_port (docs/templates.md)",
  ONBUILD: 'ONBUILD is not supported',
  STOPSIGNAL: 'STOPSIGNAL is not supported: a runtime is stopped with its VM',
};

export function parseDockerfile(text: string): ParsedDockerfile {
  if (Buffer.byteLength(text) > MAX_DOCKERFILE_BYTES) throw new DockerfileError(null, `it is larger than ${MAX_DOCKERFILE_BYTES} bytes`);
  if (text.includes('\0')) throw new DockerfileError(null, 'it holds a NUL byte: it is not a text file');
  const ast = DockerfileParser.parse(blankComments(text));
  const warnings: Warning[] = [];
  for (const d of ast.getDirectives()) {
    const name = d.getName().toLowerCase();
    if (name === 'syntax') warnings.push({ line: d.getRange().start.line + 1, message: `the syntax directive is ignored: this is Vessel's own builder` });
    else if (name === 'escape' && !['\\', '`'].includes(d.getValue())) throw new DockerfileError(d.getRange().start.line + 1, `the escape directive takes \\ or \`, not '${d.getValue()}'`);
  }
  const escape = ast.getEscapeCharacter();
  const out: ParsedDockerfile = { escape, globalArgs: [], stages: [], warnings };
  for (const instruction of ast.getInstructions()) {
    const line = instruction.getRange().start.line + 1;
    const keyword = instruction.getKeyword().toUpperCase();
    const content = instruction.getArgumentsContent()?.trim() ?? '';
    const fail = (message: string): never => {
      throw new DockerfileError(line, message);
    };
    if (REFUSED[keyword] !== undefined) fail(REFUSED[keyword]!);
    if (!KEYWORDS.has(keyword)) fail(`unknown instruction ${instruction.getInstruction()}`);
    const heredocs = (instruction as Instruction & { getHeredocs?: () => unknown[] }).getHeredocs?.() ?? [];
    if (heredocs.length > 0) fail(`heredocs (<<) are not supported yet: write the lines as a RUN command or COPY a file`);
    if (content === '' && keyword !== 'ARG') fail(`${keyword} needs arguments`);
    const flags = flagsOf(instruction, fail);
    const allowFlags = (allowed: string[]) => {
      for (const name of flags.keys()) if (!allowed.includes(name)) fail(`${keyword} --${name} is not supported${allowed.length === 0 ? '' : ` (only ${allowed.map((a) => `--${a}`).join(', ')})`}`);
    };

    if (keyword === 'FROM') {
      allowFlags(['platform']);
      const words = content.split(/\s+/);
      if (words.length === 3 && words[1]!.toUpperCase() === 'AS') {
        const name = words[2]!.toLowerCase();
        if (!/^[a-z][a-z0-9._-]*$/.test(name)) fail(`stage name '${words[2]}' must start with a letter and hold only letters, digits, '.', '_' and '-'`);
        if (out.stages.some((s) => s.name === name)) fail(`a stage named '${name}' already exists`);
        out.stages.push({ line, from: words[0]!, platform: flags.get('platform') ?? null, name, instructions: [] });
      } else if (words.length === 1) {
        out.stages.push({ line, from: words[0]!, platform: flags.get('platform') ?? null, name: null, instructions: [] });
      } else fail('FROM takes an image and optionally AS <name>');
      continue;
    }
    if (keyword === 'ARG') {
      allowFlags([]);
      const args = parseArgs(content, escape, fail);
      const stage = out.stages.at(-1);
      if (stage === undefined) out.globalArgs.push({ line, args });
      else stage.instructions.push({ line, keyword: 'ARG', args });
      continue;
    }
    const stage = out.stages.at(-1) ?? fail('FROM must come first: only ARG may come before it');

    switch (keyword) {
      case 'RUN':
        allowFlags([]);
        stage.instructions.push({ line, keyword, command: commandForm(content) });
        break;
      case 'CMD':
      case 'ENTRYPOINT':
        allowFlags([]);
        stage.instructions.push({ line, keyword, command: commandForm(content) });
        break;
      case 'SHELL': {
        allowFlags([]);
        const form = commandForm(content);
        if (form.form !== 'exec' || form.argv.length === 0) fail('SHELL takes a JSON array, e.g. ["/bin/bash", "-c"]');
        stage.instructions.push({ line, keyword, argv: (form as { argv: string[] }).argv });
        break;
      }
      case 'COPY':
      case 'ADD': {
        allowFlags(keyword === 'COPY' ? ['chown', 'chmod', 'from', 'link'] : ['chown', 'chmod', 'link']);
        const form = commandForm(content);
        const words = form.form === 'exec' ? form.argv : content.split(/\s+/);
        if (words.length < 2) fail(`${keyword} takes at least one source and a destination`);
        stage.instructions.push({ line, keyword, words, chown: flags.get('chown') ?? null, chmod: flags.get('chmod') ?? null, from: flags.get('from') ?? null });
        break;
      }
      case 'ENV':
      case 'LABEL':
        allowFlags([]);
        stage.instructions.push({ line, keyword, pairs: parsePairs(keyword, content, escape, fail) });
        break;
      case 'MAINTAINER':
        allowFlags([]);
        warnings.push({ line, message: 'MAINTAINER is deprecated: it became the label "maintainer"' });
        // Single-quoted for expandWord, so the text is taken as it is, whatever the escape character.
        stage.instructions.push({ line, keyword: 'LABEL', pairs: [['maintainer', content.split("'").map((part) => `'${part}'`).join(`"'"`)]] });
        break;
      case 'WORKDIR':
      case 'USER':
        allowFlags([]);
        stage.instructions.push({ line, keyword, text: content });
        break;
      case 'EXPOSE':
        allowFlags([]);
        stage.instructions.push({ line, keyword, words: content.split(/\s+/) });
        break;
    }
  }
  if (out.stages.length === 0) throw new DockerfileError(null, 'it has no FROM instruction');
  return out;
}

/**
 * Docker drops every line whose first non-blank character is `#`, inside a continuation too;
 * dockerfile-ast keeps an indented one there as part of the command. Blanked (the line count
 * kept, so errors name the right line) the library sees what Docker sees. The comments before
 * the first instruction stay: they hold the parser directives.
 */
function blankComments(text: string): string {
  const lines = text.split('\n');
  let leading = true;
  for (let i = 0; i < lines.length; i++) {
    const start = lines[i]!.trimStart();
    if (leading) leading = start === '' || start.startsWith('#');
    else if (start.startsWith('#')) lines[i] = '';
  }
  return lines.join('\n');
}

const KEYWORDS = new Set(['FROM', 'ARG', 'RUN', 'CMD', 'ENTRYPOINT', 'SHELL', 'COPY', 'ADD', 'ENV', 'LABEL', 'MAINTAINER', 'WORKDIR', 'USER', 'EXPOSE']);

function flagsOf(instruction: Instruction, fail: (m: string) => never): Map<string, string> {
  const flags = new Map<string, string>();
  const getFlags = (instruction as Instruction & { getFlags?: () => { getName(): string; getValue(): string | null }[] }).getFlags;
  for (const flag of getFlags?.call(instruction) ?? []) {
    const name = flag.getName();
    if (flags.has(name)) fail(`--${name} is given twice`);
    // --link takes no value; every other flag we take needs one.
    flags.set(name, flag.getValue() ?? (name === 'link' ? 'true' : fail(`--${name} needs a value (--${name}=…)`)));
  }
  return flags;
}

/** Docker's rule: arguments that parse as a JSON array of strings are the exec form; anything else is shell text. */
function commandForm(content: string): CommandForm {
  if (content.startsWith('[')) {
    try {
      const parsed: unknown = JSON.parse(content);
      if (Array.isArray(parsed) && parsed.every((w) => typeof w === 'string')) return { form: 'exec', argv: parsed };
    } catch {
      // Not JSON: Docker runs it through the shell, brackets and all.
    }
  }
  return { form: 'shell', text: content };
}

function parseArgs(content: string, escape: string, fail: (m: string) => never): ArgDeclaration[] {
  const words = splitWords(content, escape);
  if (words.length === 0) fail('ARG needs a name');
  return words.map((word) => {
    const eq = word.indexOf('=');
    const name = eq < 0 ? word : word.slice(0, eq);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) fail(`'${name}' is not a valid ARG name`);
    return { name, default: eq < 0 ? null : word.slice(eq + 1) };
  });
}

/** ENV and LABEL: `KEY=value …`, or the old `KEY value` form (the rest of the line is the value). */
function parsePairs(keyword: string, content: string, escape: string, fail: (m: string) => never): [string, string][] {
  const words = splitWords(content, escape);
  if (words.length === 0) fail(`${keyword} needs KEY=value`);
  if (!words[0]!.includes('=')) {
    const m = /^(\S+)\s+([\s\S]+)$/.exec(content) ?? fail(`${keyword} ${words[0]} needs a value: ${keyword} KEY=value`);
    return [[m[1]!, m[2]!]];
  }
  return words.map((word) => {
    const eq = word.indexOf('=');
    if (eq < 0) fail(`'${word}' is not of the form KEY=value`);
    if (eq === 0) fail(`${keyword} names cannot be empty`);
    return [word.slice(0, eq), word.slice(eq + 1)];
  });
}

// ————— planning —————

/** What an image says about running it: the parts of an OCI image config a build reads and writes. */
export interface ImageConfig {
  env: [string, string][];
  workdir: string;
  user: string;
  cmd: string[] | null;
  entrypoint: string[] | null;
  labels: Record<string, string>;
  exposedPorts: string[];
}

/** Labels come from users: an object without a prototype, so `__proto__` is only a label. */
export const labelsOf = (pairs: Iterable<[string, string]> = []): Record<string, string> => {
  const labels = Object.create(null) as Record<string, string>;
  for (const [k, v] of pairs) labels[k] = v;
  return labels;
};

export const emptyConfig = (): ImageConfig => ({ env: [], workdir: '/', user: '', cmd: null, entrypoint: null, labels: labelsOf(), exposedPorts: [] });

const DEFAULT_SHELL = ['/bin/sh', '-c'];
/** Docker's automatic platform ARGs; only linux/amd64 guests exist. */
const PLATFORM_ARGS: Record<string, string> = {
  TARGETPLATFORM: 'linux/amd64', TARGETOS: 'linux', TARGETARCH: 'amd64', TARGETVARIANT: '',
  BUILDPLATFORM: 'linux/amd64', BUILDOS: 'linux', BUILDARCH: 'amd64', BUILDVARIANT: '',
};

/** A step that makes a layer: what a build runs, in order, and what its cache key covers (step-keys.ts). */
export type Step =
  | { kind: 'run'; line: number; argv: string[]; env: [string, string][]; workdir: string; user: string }
  | { kind: 'copy'; line: number; sources: string[]; dest: string; destIsDir: boolean; chown: string | null; chmod: number | null; fromStage: number | null; extractArchives: boolean; workdir: string }
  | { kind: 'workdir'; line: number; path: string; user: string };

export type StageBase = { kind: 'image'; ref: string; line: number } | { kind: 'stage'; index: number } | { kind: 'scratch' };

export interface PlannedStage {
  index: number;
  name: string | null;
  base: StageBase;
  steps: Step[];
  /** The config the stage ends with: its base image's, with the Dockerfile's changes. */
  config: ImageConfig;
  /**
   * The stage sets CMD or ENTRYPOINT itself. Only then is its start command run in the build: an
   * inherited one is its base's (already running in a template's layer, or an image's `bash`).
   */
  startSetHere: boolean;
}

export interface BuildPlan {
  /** The stages the target needs, in build order; the last is the target. */
  stages: PlannedStage[];
  warnings: Warning[];
}

export interface PlanOptions {
  buildArgs?: Record<string, string>;
  /** The configs of the base images that `baseImages` named, by reference. */
  baseConfigs?: Map<string, ImageConfig>;
}

const wordError = (line: number, err: unknown): never => {
  if (err instanceof WordError) throw new DockerfileError(line, err.message);
  throw err;
};

/** The global ARGs' values: defaults in order, each overridden by a build arg of its name. */
function globalArgValues(parsed: ParsedDockerfile, buildArgs: Record<string, string>, used: Set<string>): Map<string, string | undefined> {
  const values = new Map<string, string | undefined>();
  const lookup: Lookup = (name) => (values.has(name) ? values.get(name) : PLATFORM_ARGS[name]);
  for (const { line, args } of parsed.globalArgs) {
    for (const a of args) {
      used.add(a.name);
      let value = Object.hasOwn(buildArgs, a.name) ? buildArgs[a.name] : undefined;
      if (value === undefined && a.default !== null) {
        try {
          value = expandWord(a.default, lookup, parsed.escape);
        } catch (err) {
          wordError(line, err);
        }
      }
      values.set(a.name, value);
    }
  }
  return values;
}

/** Stage FROM lines, resolved: a base image reference, an earlier stage, or scratch. */
function resolveBases(parsed: ParsedDockerfile, globals: Map<string, string | undefined>): StageBase[] {
  const lookup: Lookup = (name) => (globals.has(name) ? globals.get(name) : PLATFORM_ARGS[name]);
  return parsed.stages.map((stage, index) => {
    let ref = '';
    let platform = '';
    try {
      ref = expandWord(stage.from, lookup, parsed.escape);
      platform = stage.platform === null ? 'linux/amd64' : expandWord(stage.platform, lookup, parsed.escape);
    } catch (err) {
      wordError(stage.line, err);
    }
    if (platform !== 'linux/amd64') throw new DockerfileError(stage.line, `--platform=${platform}: guests are linux/amd64`);
    if (ref === '') throw new DockerfileError(stage.line, `FROM ${stage.from} names no image (is an ARG unset?)`);
    if (ref.toLowerCase() === 'scratch') return { kind: 'scratch' };
    const earlier = parsed.stages.findIndex((s, i) => i < index && s.name === ref.toLowerCase());
    if (earlier >= 0) return { kind: 'stage', index: earlier };
    if (!/^[a-z0-9][a-z0-9._/:@-]*$/i.test(ref) || ref.length > 512) throw new DockerfileError(stage.line, `'${ref}' is not an image reference`);
    return { kind: 'image', ref, line: stage.line };
  });
}

/** The stages the last one needs (through FROM and COPY --from), in Dockerfile order. */
function neededStages(parsed: ParsedDockerfile, bases: StageBase[]): number[] {
  const needed = new Set<number>();
  const visit = (i: number) => {
    if (needed.has(i)) return;
    needed.add(i);
    const base = bases[i]!;
    if (base.kind === 'stage') visit(base.index);
    for (const ins of parsed.stages[i]!.instructions) {
      if (ins.keyword === 'COPY' && ins.from !== null) {
        const from = stageIndex(parsed, ins.from, i);
        if (from === null) throw new DockerfileError(ins.line, `COPY --from=${ins.from}: only an earlier stage can be copied from, not an image`);
        visit(from);
      }
    }
  };
  visit(parsed.stages.length - 1);
  return [...needed].sort((a, b) => a - b);
}

function stageIndex(parsed: ParsedDockerfile, ref: string, before: number): number | null {
  if (/^[0-9]+$/.test(ref)) {
    const i = Number(ref);
    return i < before ? i : null;
  }
  const i = parsed.stages.findIndex((s) => s.name === ref.toLowerCase());
  return i >= 0 && i < before ? i : null;
}

/** The images the target stage stands on, whose configs `planBuild` needs. */
export function baseImages(parsed: ParsedDockerfile, buildArgs: Record<string, string> = {}): { ref: string; line: number }[] {
  const bases = resolveBases(parsed, globalArgValues(parsed, buildArgs, new Set()));
  const refs = new Map<string, number>();
  for (const i of neededStages(parsed, bases)) {
    const base = bases[i]!;
    if (base.kind === 'image' && !refs.has(base.ref)) refs.set(base.ref, base.line);
  }
  return [...refs].map(([ref, line]) => ({ ref, line }));
}

/** Every step of the stages the target needs, with variables expanded and paths resolved. */
export function planBuild(parsed: ParsedDockerfile, opts: PlanOptions = {}): BuildPlan {
  const buildArgs = opts.buildArgs ?? {};
  const used = new Set<string>();
  const globals = globalArgValues(parsed, buildArgs, used);
  const bases = resolveBases(parsed, globals);
  const warnings = [...parsed.warnings];
  const planned = new Map<number, PlannedStage>();
  let layerSteps = 0;
  for (const index of neededStages(parsed, bases)) {
    const stage = parsed.stages[index]!;
    const base = bases[index]!;
    let config: ImageConfig;
    if (base.kind === 'stage') config = planned.get(base.index)!.config;
    else if (base.kind === 'scratch') config = emptyConfig();
    else config = opts.baseConfigs?.get(base.ref) ?? fail(stage.line, `no config was given for the base image ${base.ref}`);
    const planner = new StagePlanner(parsed, stage.line, config, globals, buildArgs, used);
    for (const ins of stage.instructions) planner.apply(ins, (ref) => stageIndex(parsed, ref, index));
    layerSteps += planner.steps.length;
    if (layerSteps > MAX_LAYER_STEPS) throw new DockerfileError(planner.steps.at(-1)!.line, `the build makes more than ${MAX_LAYER_STEPS} layers (RUN, COPY, ADD and WORKDIR each make one): join RUN commands with &&`);
    planned.set(index, { index, name: stage.name, base, steps: planner.steps, config: planner.result(), startSetHere: planner.startSetHere });
  }
  for (const name of Object.keys(buildArgs)) if (!used.has(name)) warnings.push({ line: null, message: `build arg ${name} is not declared by any ARG, so it was not used` });
  return { stages: [...planned.values()], warnings };
}

const fail = (line: number, message: string): never => {
  throw new DockerfileError(line, message);
};

class StagePlanner {
  readonly steps: Step[] = [];
  readonly config: ImageConfig;
  /** The image's env in order; a variable set again keeps its place, as in Docker. */
  readonly #env: Map<string, string>;
  #envBytes = 0;
  /** ARGs declared in this stage, with their values (undefined: declared without one). */
  readonly #args = new Map<string, string | undefined>();
  #shell = DEFAULT_SHELL;
  #cmdSetHere = false;
  startSetHere = false;

  constructor(
    private readonly parsed: ParsedDockerfile,
    fromLine: number,
    base: ImageConfig,
    private readonly globals: Map<string, string | undefined>,
    private readonly buildArgs: Record<string, string>,
    private readonly used: Set<string>,
  ) {
    this.config = { ...base, env: [], labels: labelsOf(Object.entries(base.labels)), exposedPorts: [...base.exposedPorts] };
    this.#env = new Map();
    for (const [k, v] of base.env) this.#setEnv(fromLine, k, v);
  }

  result(): ImageConfig {
    return { ...this.config, env: [...this.#env] };
  }

  #setEnv(line: number, key: string, value: string): void {
    const old = this.#env.get(key);
    if (old !== undefined) this.#envBytes -= Buffer.byteLength(key) + Buffer.byteLength(old) + 2;
    this.#envBytes += Buffer.byteLength(key) + Buffer.byteLength(value) + 2;
    if (this.#envBytes > MAX_ENV_BYTES) fail(line, `the environment holds more than ${MAX_ENV_BYTES} bytes`);
    this.#env.set(key, value);
  }

  /** ENV wins over ARG of the same name, as in Docker. */
  #lookup: Lookup = (name) => this.#env.get(name) ?? this.#args.get(name);

  #expand(line: number, word: string): string {
    try {
      return expandWord(word, this.#lookup, this.parsed.escape);
    } catch (err) {
      return wordError(line, err);
    }
  }

  /** What a RUN sees: the stage's ARGs that have values, under the image's env. */
  #runEnv(line: number): [string, string][] {
    const env = new Map<string, string>();
    for (const [k, v] of this.#args) if (v !== undefined) env.set(k, v);
    for (const [k, v] of this.#env) env.set(k, v);
    let bytes = 0;
    for (const [k, v] of env) bytes += Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
    if (bytes > MAX_ENV_BYTES) fail(line, `the environment holds more than ${MAX_ENV_BYTES} bytes`);
    return [...env];
  }

  #argv(command: CommandForm): string[] {
    return command.form === 'exec' ? command.argv : [...this.#shell, command.text];
  }

  #path(line: number, p: string): string {
    if (p.includes('\0')) fail(line, 'a path cannot hold a NUL byte');
    return posix.resolve(this.config.workdir, p);
  }

  apply(ins: ParsedInstruction, stageOf: (ref: string) => number | null): void {
    const line = ins.line;
    switch (ins.keyword) {
      case 'ARG':
        for (const a of ins.args) {
          this.used.add(a.name);
          let value: string | undefined;
          if (Object.hasOwn(this.buildArgs, a.name)) value = this.buildArgs[a.name];
          else if (a.default !== null) value = this.#expand(line, a.default);
          else if (this.globals.has(a.name)) value = this.globals.get(a.name);
          else value = PLATFORM_ARGS[a.name];
          this.#args.set(a.name, value);
        }
        return;
      case 'ENV':
        for (const [rawKey, rawValue] of ins.pairs) {
          const key = this.#expand(line, rawKey);
          if (key === '' || key.includes('=')) fail(line, `'${key}' is not a valid ENV name`);
          this.#setEnv(line, key, this.#expand(line, rawValue));
        }
        return;
      case 'LABEL':
        for (const [k, v] of ins.pairs) this.config.labels[this.#expand(line, k)] = this.#expand(line, v);
        return;
      case 'WORKDIR': {
        const path = this.#path(line, this.#expand(line, ins.text));
        this.config.workdir = path;
        this.steps.push({ kind: 'workdir', line, path, user: this.config.user });
        return;
      }
      case 'USER': {
        const user = this.#expand(line, ins.text);
        if (!/^[A-Za-z0-9._-]+(:[A-Za-z0-9._-]+)?$/.test(user)) fail(line, `USER '${user}' is not user[:group]`);
        this.config.user = user;
        return;
      }
      case 'EXPOSE':
        for (const w of ins.words) {
          const port = this.#expand(line, w).toLowerCase();
          if (!/^[0-9]{1,5}(\/(tcp|udp|sctp))?$/.test(port) || Number(port.split('/')[0]) > 65535) fail(line, `EXPOSE ${port} is not a port (80, 80/tcp, 53/udp)`);
          const normal = port.includes('/') ? port : `${port}/tcp`;
          if (!this.config.exposedPorts.includes(normal)) this.config.exposedPorts.push(normal);
        }
        return;
      case 'SHELL':
        this.#shell = ins.argv;
        return;
      case 'CMD':
        this.config.cmd = this.#argv(ins.command);
        this.#cmdSetHere = true;
        this.startSetHere = true;
        return;
      case 'ENTRYPOINT':
        this.config.entrypoint = this.#argv(ins.command);
        // Docker: an ENTRYPOINT drops the CMD it inherited from the base image.
        if (!this.#cmdSetHere) this.config.cmd = null;
        this.startSetHere = true;
        return;
      case 'RUN':
        this.steps.push({ kind: 'run', line, argv: this.#argv(ins.command), env: this.#runEnv(line), workdir: this.config.workdir, user: this.config.user });
        return;
      case 'COPY':
      case 'ADD': {
        const words = ins.words.map((w) => this.#expand(line, w));
        const rawDest = words.pop()!;
        const sources = words.map((s) => {
          if (ins.keyword === 'ADD' && /^[a-z][a-z0-9+.-]*:\/\//i.test(s)) fail(line, `ADD ${s}: adding from a URL is not supported; fetch it with RUN (the build's egress policy applies)`);
          if (/^git@/.test(s)) fail(line, `ADD ${s}: adding a git repository is not supported`);
          // Relative to the context's root; a trailing / changes nothing for a source.
          const clean = posix.normalize(`/${s}`).slice(1).replace(/\/$/, '') || '.';
          if (posix.normalize(s).startsWith('../') || posix.normalize(s) === '..') fail(line, `${ins.keyword} ${s}: the source is outside the build context`);
          return clean;
        });
        const destIsDir = rawDest.endsWith('/') || rawDest.endsWith('/.') || rawDest === '.';
        if (sources.length > 1 && !destIsDir) fail(line, `${ins.keyword} with more than one source needs a destination directory ending in /`);
        let chmod: number | null = null;
        if (ins.chmod !== null) {
          const m = this.#expand(line, ins.chmod);
          if (!/^[0-7]{3,4}$/.test(m)) fail(line, `--chmod=${m}: only octal modes (0755) are supported`);
          chmod = parseInt(m, 8);
        }
        const chown = ins.chown === null ? null : this.#expand(line, ins.chown);
        if (chown !== null && !/^[A-Za-z0-9._-]+(:[A-Za-z0-9._-]+)?$/.test(chown)) fail(line, `--chown=${chown} is not user[:group]`);
        // Unexpanded, as neededStages reads it: both must name the same stage.
        const fromStage = ins.keyword === 'COPY' && ins.from !== null ? stageOf(ins.from) : null;
        this.steps.push({ kind: 'copy', line, sources, dest: this.#path(line, rawDest), destIsDir, chown, chmod, fromStage, extractArchives: ins.keyword === 'ADD', workdir: this.config.workdir });
        return;
      }
    }
  }
}
