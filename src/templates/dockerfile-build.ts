/**
 * A Dockerfile built into a template (docs/templates.md, "Dockerfile builds"). The host reads the
 * build context and plans the steps (dockerfile.ts, build-context.ts), and runs none of them:
 * each layer-making step runs in a build VM (BuildVms: a runtime of the tenant's), and is sealed
 * there as a layer under its cache key (step-keys.ts). A step whose key is cached already is not
 * run: the build goes on from its layer. The template is the last step's layer.
 *
 *   RUN      the step's argv, env, cwd and USER through the guest agent (which takes the user's ids)
 *   COPY     a tar stream of the matched context (copy-archive.ts), --chown and --chmod applied
 *   WORKDIR  mkdir -p
 *   ENV, ARG, USER, LABEL, EXPOSE: the plan's config, no layer
 *   CMD, ENTRYPOINT: the start command, started after the last step and sealed running once
 *            ready (start-command.ts): a layer of its own, keyed by the command and its check
 */
import { createReadStream } from 'node:fs';
import { VesselError, invalidArgument } from '../core/errors.js';
import type { BuildReporter } from '../core/build-log.js';
import type { BuildVm, BuildVmBase, BuildVms, BuiltTemplate } from '../core/ports.js';
import { BuildFailure } from '../core/templates.js';
import type { ReadyCheck, TemplateConfig } from '../core/types.js';
import type { BlobStore } from './blob-store.js';
import { readBuildContext } from './build-context.js';
import { copyArchives, CopyError, copyTar } from './copy-archive.js';
import { baseImages, emptyConfig, parseDockerfile, planBuild, type ImageConfig, type Step } from './dockerfile.js';
import { isRoot, resolveUser, UserError, type ResolvedUser } from '../core/guest-users.js';
import { startAndWait, startSpecOf, startStepName, type ReadyClock } from './start-command.js';
import { baseKey, matchSources, startKey, stepKey, type BaseLayer } from './step-keys.js';

/** `FROM vessel`: the service's default image, the one a runtime without a template runs. */
export const DEFAULT_IMAGE_NAME = 'vessel';
/** The default image's environment as an image config would give it (the agent's base PATH). */
const DEFAULT_IMAGE_ENV: [string, string][] = [['PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin']];
/** /etc/passwd and /etc/group are read from the build VM for USER and --chown: bounded. */
const MAX_ACCOUNT_FILE_BYTES = 1024 * 1024;

export interface DockerfileBuildOptions {
  /** The uploaded build context (a tar stream, gzip or not). */
  contextFile: string;
  blobs: BlobStore;
  /** The Dockerfile's path in the context. */
  dockerfile: string;
  buildArgs: Record<string, string>;
  vms: BuildVms;
  report: BuildReporter;
  signal: AbortSignal;
  /** When the start command (CMD/ENTRYPOINT) is ready to be sealed running. */
  ready: ReadyCheck;
  /** The ready wait's time; real unless a test drives it. */
  clock?: ReadyClock;
}

export async function buildDockerfile(opts: DockerfileBuildOptions): Promise<BuiltTemplate> {
  const { vms, report, signal } = opts;
  report.step('read the build context');
  const context = await readBuildContext(createReadStream(opts.contextFile), { blobs: opts.blobs, dockerfilePath: opts.dockerfile });
  report.output(`${context.bytes} bytes of files${context.ignored > 0 ? `, ${context.ignored} left out by .dockerignore` : ''}\n`);
  const parsed = parseDockerfile(context.dockerfile!);

  // The base: the default image, or a ready template of the tenant's (an image is made a template first).
  const bases = baseImages(parsed, opts.buildArgs);
  const baseConfigs = new Map<string, ImageConfig>();
  const baseOf = new Map<string, { vm: BuildVmBase; layer: BaseLayer }>();
  for (const { ref, line } of bases) {
    if (ref === DEFAULT_IMAGE_NAME) {
      baseConfigs.set(ref, { ...emptyConfig(), env: DEFAULT_IMAGE_ENV });
      baseOf.set(ref, { vm: { kind: 'default' }, layer: { kind: 'default', imageDigest: vms.defaultImageId() } });
    } else {
      const t = await vms.template(ref).catch((err: unknown) => {
        throw err instanceof VesselError ? invalidArgument(`Dockerfile line ${line}: ${err.message}`) : err;
      });
      baseConfigs.set(ref, imageConfigOf(t.config));
      baseOf.set(ref, { vm: { kind: 'template', templateId: t.id }, layer: { kind: 'template', templateId: t.id } });
    }
  }
  const plan = planBuild(parsed, { buildArgs: opts.buildArgs, baseConfigs });
  for (const w of plan.warnings) report.output(`warning: ${w.line === null ? '' : `line ${w.line}: `}${w.message}\n`);
  if (plan.stages.length > 1) throw invalidArgument('Dockerfile: multi-stage builds (several FROM, COPY --from) are not supported yet');
  const stage = plan.stages[0]!;
  if (stage.base.kind !== 'image') throw invalidArgument(`Dockerfile: FROM scratch is not supported: build FROM ${DEFAULT_IMAGE_NAME} or a template of yours`);
  const base = baseOf.get(stage.base.ref)!;

  // Only a CMD or ENTRYPOINT of this Dockerfile's runs: an inherited one is its base's (stage.startSetHere).
  const start = stage.startSetHere ? startSpecOf(stage.config) : null;
  if (start === null && (opts.ready.command !== null || opts.ready.port !== null)) {
    throw invalidArgument('ready_cmd and ready_port wait for the start command, and this Dockerfile sets no CMD or ENTRYPOINT');
  }

  const baseRef = stage.base.ref;
  // Set inside layerStep: typed so that the finally below does not take it for null.
  let vm = null as BuildVm | null;
  try {
    let parentKey = baseKey(base.layer);
    let layer: string | null = null;
    let missed = false;
    /** One layer: from the cache while every key so far was there; else run in the build VM and sealed. */
    const layerStep = async (key: string, name: string, run: (vm: BuildVm) => Promise<void>): Promise<void> => {
      if (signal.aborted) throw new BuildFailure('the build was cancelled');
      const cached = missed ? null : await vms.findLayer(key);
      if (cached !== null) {
        report.step(name, { cached: true });
      } else {
        missed = true;
        if (vm === null) {
          report.step(layer === null ? `start a build VM from ${baseRef}` : 'start a build VM from the cached layers');
          vm = await vms.start(layer === null ? base.vm : { kind: 'layer', checkpointId: layer });
        }
        report.step(name);
        await run(vm);
      }
      layer = cached ?? (await vm!.seal(key));
      parentKey = key;
    };
    // A Dockerfile with no layer-making step and no start command is its base, sealed under the base's key.
    if (stage.steps.length === 0 && start === null) await layerStep(parentKey, `FROM ${baseRef}`, async () => undefined);
    for (const step of stage.steps) {
      const sources = step.kind === 'copy' ? matchSources(context.tree, step) : undefined;
      await layerStep(stepKey(parentKey, step, sources === undefined ? {} : { sources }), stepName(step), (on) => runStep(on, step, sources, opts, report));
    }
    // The template is sealed with its start command running: its own layer, keyed by the command and its check.
    if (start !== null) await layerStep(startKey(parentKey, start, opts.ready), startStepName(start), (on) => startAndWait(on, start, opts.ready, report, signal, opts.clock));
    return { config: templateConfigOf(stage.config), diskBytes: 0, checkpointId: layer! };
  } catch (err) {
    if (err instanceof UserError || err instanceof CopyError) throw new BuildFailure(err.message);
    throw err;
  } finally {
    await vm?.destroy().catch(() => undefined);
  }
}

async function runStep(vm: BuildVm, step: Step, sources: ReturnType<typeof matchSources> | undefined, opts: DockerfileBuildOptions, report: BuildReporter): Promise<void> {
  switch (step.kind) {
    case 'run': {
      // Root by name when USER is unset: the FROM template's own USER must not apply twice.
      const user = isRoot(step.user) ? 'root' : step.user;
      let code: number;
      try {
        code = await vm.run(step.argv, Object.fromEntries(step.env), step.workdir, user, (text) => report.output(text), opts.signal);
      } catch (err) {
        // The command could not start (no such program, directory or user): the step's failure.
        if (err instanceof VesselError && err.code === 'command_failed') throw new BuildFailure(`${stepName(step)}: ${err.message}`);
        throw err;
      }
      if (opts.signal.aborted) throw new BuildFailure('the build was cancelled');
      if (code !== 0) throw new BuildFailure(`${stepName(step)}: the command returned a non-zero code: ${code}`, code);
      return;
    }
    case 'copy': {
      const chown = step.chown === null ? null : await userOf(vm, step.chown);
      for (const archive of copyArchives(sources!, step.dest, step.destIsDir, step.extractArchives)) {
        await vm.writeArchive(archive.dir, copyTar(archive, opts.blobs, chown, step.chmod));
      }
      return;
    }
    case 'workdir':
      await vm.makeDir(step.path);
      return;
  }
}

async function userOf(vm: BuildVm, spec: string): Promise<ResolvedUser> {
  const passwd = await vm.readFile('/etc/passwd', MAX_ACCOUNT_FILE_BYTES);
  const group = spec.includes(':') ? await vm.readFile('/etc/group', MAX_ACCOUNT_FILE_BYTES) : null;
  return resolveUser(spec, passwd?.toString('utf8') ?? null, group?.toString('utf8') ?? null);
}

/** A step as its log names it: the instruction, shortened. */
export function stepName(step: Step): string {
  const text =
    step.kind === 'run' ? `RUN ${step.argv.length === 3 && step.argv[1] === '-c' ? step.argv[2] : JSON.stringify(step.argv)}`
    : step.kind === 'copy' ? `${step.extractArchives ? 'ADD' : 'COPY'} ${step.chown === null ? '' : `--chown=${step.chown} `}${step.sources.join(' ')} ${step.dest}`
    : `WORKDIR ${step.path}`;
  const oneLine = text.replace(/\s+/g, ' ');
  return oneLine.length > 200 ? `${oneLine.slice(0, 199)}…` : oneLine;
}

function imageConfigOf(c: TemplateConfig): ImageConfig {
  return { ...emptyConfig(), env: Object.entries(c.env), workdir: c.workdir ?? '/', user: c.user ?? '', cmd: c.cmd, entrypoint: c.entrypoint };
}

/** An image's (or a plan's) ENV, WORKDIR, USER, ENTRYPOINT and CMD, as a template keeps them. */
export function templateConfigOf(config: ImageConfig): TemplateConfig {
  // fromEntries defines each key as its own property: an ENV named __proto__ is only a name.
  return { env: Object.fromEntries(config.env), workdir: config.workdir === '' ? null : config.workdir, user: config.user === '' ? null : config.user, entrypoint: config.entrypoint, cmd: config.cmd };
}
