import { test } from 'node:test';
import assert from 'node:assert/strict';
import { baseImages, DockerfileError, emptyConfig, labelsOf, MAX_DOCKERFILE_BYTES, parseDockerfile, planBuild, type ImageConfig, type Step } from '../../src/templates/dockerfile.js';
import { expandWord, splitWords, WordError } from '../../src/templates/shell-words.js';

const debian: ImageConfig = { ...emptyConfig(), env: [['PATH', '/usr/local/bin:/usr/bin:/bin']], cmd: ['bash'] };
const plan = (text: string, buildArgs: Record<string, string> = {}) =>
  planBuild(parseDockerfile(text), { buildArgs, baseConfigs: new Map([['debian:12', debian], ['alpine:3.20', emptyConfig()]]) });
const target = (text: string, buildArgs: Record<string, string> = {}) => plan(text, buildArgs).stages.at(-1)!;
/** The error a bad Dockerfile gets: an invalid_argument naming its line. */
const refused = (text: string, line: number | null, message: RegExp) =>
  assert.throws(() => plan(text), (err: unknown) => err instanceof DockerfileError && err.code === 'invalid_argument' && err.line === line && message.test(err.message));

test('the instructions a template uses, with line continuations and comments', () => {
  const stage = target(`# a comment
FROM debian:12
ENV APP=/srv/app \\
    GREETING="hello world"
# a comment inside the file
WORKDIR $APP
COPY --chown=1000:1000 --chmod=0755 requirements.txt src/ ./
RUN apt-get update \\
  # a comment inside a continuation is dropped, as Docker does
  && apt-get install -y python3
RUN ["python3", "-c", "print('a b')"]
USER 1000:1000
LABEL org.opencontainers.image.title="my app" version=1
EXPOSE 8000 53/udp
CMD ["python3", "-m", "http.server"]
`);
  assert.deepEqual(stage.base, { kind: 'image', ref: 'debian:12', line: 2 });
  const [workdir, copy, run1, run2] = stage.steps as [Step & { kind: 'workdir' }, Step & { kind: 'copy' }, Step & { kind: 'run' }, Step & { kind: 'run' }];
  assert.deepEqual(workdir, { kind: 'workdir', line: 6, path: '/srv/app', user: '' });
  assert.deepEqual(copy, { kind: 'copy', line: 7, sources: ['requirements.txt', 'src'], dest: '/srv/app', destIsDir: true, chown: '1000:1000', chmod: 0o755, fromStage: null, extractArchives: false, workdir: '/srv/app' });
  assert.deepEqual(run1.argv, ['/bin/sh', '-c', 'apt-get update   && apt-get install -y python3']);
  assert.equal(run1.line, 8);
  assert.equal(run1.workdir, '/srv/app');
  assert.deepEqual(run1.env, [['PATH', '/usr/local/bin:/usr/bin:/bin'], ['APP', '/srv/app'], ['GREETING', 'hello world']]);
  assert.deepEqual(run2.argv, ['python3', '-c', "print('a b')"], 'the exec form keeps the spaces inside its strings');
  assert.deepEqual(stage.config.cmd, ['python3', '-m', 'http.server']);
  assert.equal(stage.config.user, '1000:1000');
  assert.equal(stage.config.workdir, '/srv/app');
  assert.deepEqual({ ...stage.config.labels }, { 'org.opencontainers.image.title': 'my app', version: '1' });
  assert.deepEqual(stage.config.exposedPorts, ['8000/tcp', '53/udp']);
});

test('a continuation joins lines as Docker does: the escape and newline go, the indentation stays', () => {
  const run = target('FROM debian:12\nRUN echo a \\\n  b\n').steps[0] as Step & { kind: 'run' };
  assert.deepEqual(run.argv, ['/bin/sh', '-c', 'echo a   b']);
});

test('the escape directive changes the continuation character', () => {
  const run = target('# escape=`\nFROM debian:12\nRUN echo a `\n  b \\ c\n').steps[0] as Step & { kind: 'run' };
  assert.deepEqual(run.argv, ['/bin/sh', '-c', 'echo a   b \\ c']);
});

test('variables: $VAR, ${VAR}, defaults, alternatives, ENV over ARG, single quotes keep them', () => {
  const stage = target(`FROM debian:12
ARG VERSION=1.0
ARG EMPTY=
ENV A=$VERSION B=\${VERSION}-x C=\${UNSET:-dflt} D=\${EMPTY:-dflt} E=\${EMPTY-kept} F=\${VERSION:+alt} G=\${UNSET:+alt} H='$VERSION' I="$VERSION" J=\\$VERSION
ENV PATH=/opt/bin:$PATH
ENV VERSION=2.0
ENV K=$VERSION
`);
  const env = new Map(stage.config.env);
  assert.equal(env.get('A'), '1.0');
  assert.equal(env.get('B'), '1.0-x');
  assert.equal(env.get('C'), 'dflt');
  assert.equal(env.get('D'), 'dflt');
  assert.equal(env.get('E'), '', '${VAR-x} only replaces an unset variable');
  assert.equal(env.get('F'), 'alt');
  assert.equal(env.get('G'), '');
  assert.equal(env.get('H'), '$VERSION');
  assert.equal(env.get('I'), '1.0');
  assert.equal(env.get('J'), '$VERSION');
  assert.equal(env.get('PATH'), '/opt/bin:/usr/local/bin:/usr/bin:/bin', "the base image's env is there to extend");
  assert.equal(env.get('K'), '2.0', 'ENV wins over an ARG of the same name');
  assert.equal([...env.keys()].indexOf('PATH'), 0, 'a variable set again keeps its place');
});

test('build args override ARG defaults; global ARGs serve FROM and are inherited by a bare ARG in a stage', () => {
  const text = `ARG BASE=debian
ARG TAG=12
FROM \${BASE}:\${TAG}
ARG TAG
ARG MODE=dev
RUN echo $MODE $TAG
`;
  assert.deepEqual(baseImages(parseDockerfile(text)), [{ ref: 'debian:12', line: 3 }]);
  assert.deepEqual(baseImages(parseDockerfile(text), { BASE: 'alpine', TAG: '3.20' }), [{ ref: 'alpine:3.20', line: 3 }]);
  const built = plan(text, { MODE: 'prod', UNUSED: 'x' });
  const run = built.stages[0]!.steps[0] as Step & { kind: 'run' };
  assert.deepEqual(new Map(run.env).get('MODE'), 'prod');
  assert.deepEqual(new Map(run.env).get('TAG'), '12');
  assert.deepEqual(run.argv, ['/bin/sh', '-c', 'echo $MODE $TAG'], 'RUN is left to the shell');
  assert.ok(built.warnings.some((w) => /UNUSED/.test(w.message)), 'an unused build arg is reported');
  const noTag = target('ARG TAG=12\nFROM debian:12\nRUN true\n').steps[0] as Step & { kind: 'run' };
  assert.equal(new Map(noTag.env).get('TAG'), undefined, 'a global ARG is not in a stage until it is declared there');
});

test('shell and exec forms of CMD and ENTRYPOINT, SHELL, and ENTRYPOINT dropping an inherited CMD', () => {
  let stage = target('FROM debian:12\nENTRYPOINT ["/entry"]\n');
  assert.deepEqual(stage.config.entrypoint, ['/entry']);
  assert.equal(stage.config.cmd, null, "the base image's CMD is dropped by ENTRYPOINT");
  stage = target('FROM debian:12\nCMD ["x"]\nENTRYPOINT ["/entry"]\n');
  assert.deepEqual(stage.config.cmd, ['x'], 'but not a CMD of this Dockerfile');
  stage = target('FROM debian:12\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\nRUN a | b\nCMD serve --port 80\n');
  assert.deepEqual((stage.steps[0] as Step & { kind: 'run' }).argv, ['/bin/bash', '-o', 'pipefail', '-c', 'a | b']);
  assert.deepEqual(stage.config.cmd, ['/bin/bash', '-o', 'pipefail', '-c', 'serve --port 80']);
  stage = target('FROM debian:12\nCMD [python, app.py]\n');
  assert.deepEqual(stage.config.cmd, ['/bin/sh', '-c', '[python, app.py]'], 'not JSON: the shell form, as Docker does');
});

test('stages: FROM an earlier stage, COPY --from, and stages the target does not need are skipped', () => {
  const built = plan(`FROM debian:12 AS deps
RUN make deps
FROM alpine:3.20 AS unused
RUN never
FROM deps AS build
RUN make
FROM debian:12
COPY --from=build /out /app
COPY --from=0 /deps /deps
`);
  assert.deepEqual(built.stages.map((s) => s.name), ['deps', 'build', null]);
  assert.deepEqual(built.stages[1]!.base, { kind: 'stage', index: 0 });
  const [a, b] = built.stages[2]!.steps as (Step & { kind: 'copy' })[];
  assert.equal(a!.fromStage, 2, 'the index of the stage in the Dockerfile');
  assert.equal(b!.fromStage, 0);
  assert.deepEqual(baseImages(parseDockerfile('FROM scratch\nCOPY a /a\n')), []);
});

test('MAINTAINER becomes a label taken literally', () => {
  const stage = target(`FROM debian:12\nMAINTAINER Jo 'Q' $HOME <jo@example.com>\n`);
  assert.equal(stage.config.labels['maintainer'], `Jo 'Q' $HOME <jo@example.com>`);
});

test('labels are plain data: __proto__ is only a label', () => {
  const stage = target('FROM debian:12\nLABEL __proto__=x constructor=y\n');
  assert.equal(stage.config.labels['__proto__'], 'x');
  assert.equal(Object.getPrototypeOf(stage.config.labels), null);
  assert.deepEqual(Object.keys(labelsOf([['a', 'b']])), ['a']);
});

test('bad input is refused with the line it is on', () => {
  refused('', null, /no FROM/);
  refused('RUN echo\nFROM debian:12\n', 1, /FROM must come first/);
  refused('FROM debian:12\nFOO bar\n', 2, /unknown instruction FOO/);
  refused('FROM debian:12\nRUN\n', 2, /RUN needs arguments/);
  refused('FROM debian:12\n\nENV A\n', 3, /needs a value/);
  refused('FROM debian:12\nENV A=1 B\n', 2, /'B' is not of the form KEY=value/);
  refused('FROM debian:12\nENV A="unterminated\n', 2, /unterminated double quote/);
  refused('FROM debian:12\nENV A=${B\n', 2, /missing '}'/);
  refused('FROM debian:12\nENV A=${B/x/y}\n', 2, /unsupported modifier/);
  refused('FROM debian:12\nENV A="${B:?must be set}"\n', 2, /B: must be set/);
  refused('FROM debian:12\nCOPY onlyone\n', 2, /at least one source and a destination/);
  refused('FROM debian:12\nCOPY a b /notadir\n', 2, /destination directory ending in \//);
  refused('FROM debian:12\nCOPY ../secret /x\n', 2, /outside the build context/);
  refused('FROM debian:12\nADD https://example.com/x /x\n', 2, /from a URL is not supported/);
  refused('FROM debian:12\nCOPY --from=nginx:latest /a /a\n', 2, /only an earlier stage/);
  refused('FROM debian:12\nRUN --mount=type=cache,target=/x make\n', 2, /RUN --mount is not supported/);
  refused('FROM debian:12\nCOPY --chmod=u+x a /a\n', 2, /only octal modes/);
  refused('FROM debian:12\nVOLUME /data\n', 2, /VOLUME is not supported/);
  refused('FROM debian:12\nHEALTHCHECK CMD true\n', 2, /HEALTHCHECK is not supported/);
  refused('FROM debian:12\nRUN <<EOF\necho hi\nEOF\n', 2, /heredocs/);
  refused('FROM debian:12\nSHELL /bin/bash -c\n', 2, /SHELL takes a JSON array/);
  refused('FROM --platform=linux/arm64 debian:12\n', 1, /guests are linux\/amd64/);
  refused('FROM debian:12 AS a\nFROM debian:12 AS a\n', 2, /already exists/);
  refused('FROM debian:12 AS\n', 1, /FROM takes an image/);
  refused('ARG B\nFROM $B\n', 2, /names no image/);
  refused('FROM debian:12\nEXPOSE 70000\n', 2, /is not a port/);
  refused('FROM debian:12\nUSER a b\n', 2, /is not user\[:group\]/);
  refused('# escape=x\nFROM debian:12\n', 1, /escape directive/);
  refused(`FROM debian:12\n${'RUN true\n'.repeat(128)}`, 129, /more than 127 layers/);
});

test('size and expansion are bounded', () => {
  assert.throws(() => parseDockerfile(`FROM debian:12\nRUN ${'x'.repeat(MAX_DOCKERFILE_BYTES)}\n`), /larger than/);
  // Each line doubles A: without the cap, 40 lines would make a value of a terabyte.
  refused(`FROM debian:12\nENV A=xxxxxxxxxxxxxxxx\n${'ENV A=$A$A\n'.repeat(40)}`, 16, /more than 131072 characters/);
  refused(`FROM debian:12\nENV A=${'${X:-'.repeat(20)}${'}'.repeat(20)}\n`, 2, /nest more than 16 deep/);
});

test('words split and expand as in BuildKit', () => {
  assert.deepEqual(splitWords(`a=1 b="x y" c='p q' d=\\ e ""`, '\\'), ['a=1', 'b="x y"', "c='p q'", 'd=\\ e', '""']);
  const env: Record<string, string> = { A: 'va', EMPTY: '' };
  const x = (w: string) => expandWord(w, (n) => env[n], '\\');
  assert.equal(x('$A$B-${A}'), 'va-va');
  assert.equal(x('"$A \\"q\\" \\x"'), 'va "q" \\x');
  assert.equal(x("'$A'\"$A\""), '$Ava');
  assert.equal(x('$'), '$');
  assert.equal(x('a$-b'), 'ab', 'special parameters are empty');
  assert.equal(x('${EMPTY:-${A:-z}}'), 'va');
  assert.equal(expandWord('`$A', (n) => env[n], '`'), '$A');
  assert.throws(() => x("'open"), WordError);
});
