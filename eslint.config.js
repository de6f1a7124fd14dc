/**
 * ESLint: typescript-eslint's recommended type-aware rules over every TypeScript tree we write.
 * `npm run lint`. Exceptions are few and each says why. It finds nothing, and
 * test/unit/lint.test.ts keeps it so: a finding fails the tests.
 */
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'build/', 'data/', 'client/generated/', 'client/dist/', 'src/e2b/gen/'] },
  {
    files: ['{src,client,console,test,bench,scripts}/**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        // Each file is checked with its own tsconfig (the root one, client/, console/).
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // node:test's test()/describe() return promises the runner itself awaits: every test file
      // calls them at top level, and awaiting them would serialize the file's tests by hand.
      '@typescript-eslint/no-floating-promises': ['error', { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite'] }] }],
      // A leading underscore names what is unused on purpose: a port method's parameter a fake
      // ignores, an element skipped in a destructuring.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' }],
      // `async` without `await` is how the port implementations, fakes and handlers here make a
      // synchronous throw a rejection, as their Promise-returning interfaces promise.
      '@typescript-eslint/require-await': 'off',
      // The code writes `!` on indexed reads (`bytes[i]!`) throughout, as if noUncheckedIndexedAccess
      // were on: each marks a read the author checked. Under today's tsconfig the rule calls all
      // of them (about 340) unnecessary; removing them would lose that and touch every module.
      '@typescript-eslint/no-unnecessary-type-assertion': 'off',
    },
  },
  {
    // Tests and benchmarks read JSON replies typed `any` (test/support/service.ts's Reply.body)
    // and assert on their shape, which is what these tests are for; typing every reply would
    // restate the API schemas in the tests. Production code keeps the rules.
    files: ['{test,bench}/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
);
