// ESLint flat config: typed linting of the TypeScript sources with typescript-eslint.
// Run with `npm run lint`.
import eslint from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: ["dist/", "node_modules/", "scripts/", ".tools/", "eslint.config.js"],
  },
  {
    files: ["src/**/*.ts", "test/**/*.ts", "bench/**/*.ts"],
    extends: [eslint.configs.recommended, ...tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // A forgotten or misplaced promise is the bug class this library cares most about.
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      // `_`-prefixed names are intentionally unused (callback positions, destructuring).
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrorsIgnorePattern: "^_" }],
    },
  },
  {
    // node:test's describe/test return promises that the runner tracks itself.
    files: ["test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-floating-promises": ["error", { allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["describe", "test", "it", "suite"] }] }],
    },
  },
);
